-- wf-scheduler on PostgreSQL: the whole store (host and scheduler), version 1.
-- Every JSON document is the record the file store keeps in its files, so a
-- store moves between backends unchanged (docs/storage.md, "PostgreSQL").

-- Artifacts: immutable plan versions.
CREATE TABLE wf_artifacts (
    artifact_id text NOT NULL,
    version integer NOT NULL CHECK (version >= 1),
    record jsonb NOT NULL,
    PRIMARY KEY (artifact_id, version)
);

-- Deployments: replaced whole on every save.
CREATE TABLE wf_deployments (
    deployment_id text PRIMARY KEY,
    record jsonb NOT NULL
);

-- Run ids: run-000001... from a sequence, which never hands a number out
-- twice, not even across a crash (a crash may skip some).
CREATE SEQUENCE wf_run_number AS bigint MINVALUE 1 NO CYCLE;

-- Runs: the run record (status, snapshot, executing mark, checkpoint, trace).
-- `status` is kept beside the record for listing by status; `schedule_id`
-- for a start's check of the runs that claim a schedule's occurrences.
CREATE TABLE wf_runs (
    run_number bigint PRIMARY KEY CHECK (run_number >= 1),
    status text NOT NULL,
    schedule_id text,
    record jsonb NOT NULL
);
CREATE INDEX wf_runs_by_status ON wf_runs (status, run_number);
CREATE INDEX wf_runs_by_schedule ON wf_runs (schedule_id, run_number)
    WHERE schedule_id IS NOT NULL;

-- Schedules: the snapshot of each lifecycle log (definition, revision, flags,
-- the blocking diagnostic).
CREATE TABLE wf_schedules (
    schedule_id text PRIMARY KEY,
    lifecycle_seq integer NOT NULL CHECK (lifecycle_seq >= 1),
    snapshot jsonb NOT NULL
);

-- The lifecycle log: one record per change, seq dense from 1. The truth the
-- snapshot is checked against.
CREATE TABLE wf_schedule_lifecycle (
    schedule_id text NOT NULL REFERENCES wf_schedules (schedule_id),
    seq integer NOT NULL CHECK (seq >= 1),
    record jsonb NOT NULL,
    PRIMARY KEY (schedule_id, seq)
);

-- The scheduler's runtime record per schedule: watermark, held candidate,
-- waiting instants, the last lifecycle record consumed.
CREATE TABLE wf_schedule_runtime (
    schedule_id text PRIMARY KEY REFERENCES wf_schedules (schedule_id),
    record jsonb NOT NULL
);

-- The occurrence history: one row per decided occurrence, seq dense from 0,
-- with its decision row and its latest transition row (NULL while the
-- decision is the latest). The unique key on (schedule_id, instant) makes a
-- second decision of one instant impossible in the database itself.
CREATE TABLE wf_occurrences (
    schedule_id text NOT NULL REFERENCES wf_schedules (schedule_id),
    seq integer NOT NULL CHECK (seq >= 0),
    instant timestamptz NOT NULL,
    status text NOT NULL,
    decision jsonb NOT NULL,
    latest jsonb,
    PRIMARY KEY (schedule_id, seq),
    CONSTRAINT wf_occurrences_one_decision_per_instant UNIQUE (schedule_id, instant)
);
-- The occurrences whose runs are not finished: what a start tracks.
CREATE INDEX wf_occurrences_open ON wf_occurrences (schedule_id, seq)
    WHERE status IN ('admitted', 'running', 'interrupted');

-- The scheduler that owns the store. One row; `epoch` grows at every
-- takeover, and every scheduler write checks it inside its transaction.
CREATE TABLE wf_scheduler_owner (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    epoch bigint NOT NULL,
    holder jsonb NOT NULL
);
