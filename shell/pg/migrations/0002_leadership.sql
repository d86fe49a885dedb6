-- Several servers on one store: a leadership lease on the database's clock,
-- the servers proving they are alive, and run records changed only from the
-- version their writer read.

-- The scheduler that leads holds a lease until `lease_until` (the database's
-- clock); NULL once it gave it up. A taking needs no lease or a lapsed one
-- (or a holder known dead) and moves the epoch on; every write of the leader
-- checks, inside its transaction, that the epoch is still its own and the
-- lease not lapsed.
ALTER TABLE wf_scheduler_owner ADD COLUMN lease_until timestamptz;

-- Every server process on the store, from its start: it proves it is alive
-- by moving `heartbeat_at` (the database's clock). A server that stops
-- cleanly says so (`stopped_at`); one silent for too long, or known dead on
-- its machine, is declared gone (`gone_at`), after which nothing it writes
-- to a run commits, and the runs it was executing are failed as abandoned.
-- `boot_id`, `pid_namespace` and `process_start` tell a server on the same
-- machine that a process is dead for sure (its pid no longer runs, or runs
-- another program), so a restart need not wait for the silence.
CREATE TABLE wf_servers (
    server_id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    boot_id text,
    pid_namespace text,
    process_start bigint,
    started_at timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    stopped_at timestamptz,
    gone_at timestamptz,
    -- Why it was declared gone: 'dead' (its process is known dead) or
    -- 'silent' (it may be frozen or cut off rather than dead).
    gone_why text CHECK (gone_why IN ('dead', 'silent'))
);

-- A run record changes only from the version its writer read: two servers
-- resuming one run, or a sweep failing a run its server still writes, are
-- refused instead of overwriting each other.
ALTER TABLE wf_runs ADD COLUMN version bigint NOT NULL DEFAULT 1;
