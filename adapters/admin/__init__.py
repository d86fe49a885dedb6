"""The operator commands of `wf-schedule`, spoken to a running `wf-rpc-server`.

Modules: `session` (the options every command takes, the call to the server,
failures and their exit statuses), `output` (tables, JSON, colours),
`schedules` (create, list, get, update, pause, resume, delete, trigger,
backfill, backfill-cancel), `occurrences`
(history, `--watch`, `--wait-for`) and `host` (health, artifacts,
deployments, runs). `adapters.schedule_admin` puts them on the root command.

Nothing here is imported by `import adapters.admin`: the CLI imports the
modules it registers, and those load rich and the HTTP client only when a
command prints or calls.
"""

__all__: list[str] = []
