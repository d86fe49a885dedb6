"""The operator console of `wf-rpc-server`: pages rendered on the server.

Modules: `app` (the pages and actions), `catalog` (the schedules list kept
for large stores), `present` (words, times, colours), `timeline` (the SVG),
`security` (who may read, forms protected against cross-site requests),
`templates/` and `static/` (served from the package). See docs/console.md.
"""

from __future__ import annotations

from adapters.console.app import Console, console_routes

__all__ = ["Console", "console_routes"]
