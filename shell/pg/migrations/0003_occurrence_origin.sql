-- Who opened an occurrence: the calendar ('schedule'), an operator's trigger
-- ('trigger', keyed by the moment it was made) or a backfill ('backfill',
-- keyed by the calendar instant it makes up for, whose calendar row exists
-- already with another status). The column repeats the decision row's
-- "origin" (absent there for a calendar row), as `status` repeats its
-- latest status. Every row before this migration is a calendar row.
ALTER TABLE wf_occurrences
    ADD COLUMN origin text NOT NULL DEFAULT 'schedule'
    CONSTRAINT wf_occurrences_origin CHECK (origin IN ('schedule', 'trigger', 'backfill'));

-- One decision per instant and origin: a backfill's row shares its instant
-- with the calendar's row of that instant, never with another backfill's;
-- calendar instants (and triggers') stay unique among themselves. The key's
-- index also finds a schedule's newest calendar or trigger decision and a
-- range of instants of one origin.
ALTER TABLE wf_occurrences DROP CONSTRAINT wf_occurrences_one_decision_per_instant;
ALTER TABLE wf_occurrences
    ADD CONSTRAINT wf_occurrences_one_decision_per_instant UNIQUE (schedule_id, origin, instant);
