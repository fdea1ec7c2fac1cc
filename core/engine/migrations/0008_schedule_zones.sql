-- 8: schedules in an explicit zone, a revision that firing re-checks, and disabling (issue 22)

-- `tz`: the zone the cron expression is read in (UTC unless `schedule add --tz` named one);
-- never the session's, which differs between workers. `revision` changes with every
-- `schedule add` of the name, so a worker that computed a slot from an older version of the
-- schedule fires nothing. A schedule that fails when a worker evaluates or fires it is
-- disabled with its error, not retried for ever; adding it again enables it.
ALTER TABLE taskboard_schedules
    ADD COLUMN tz             text   NOT NULL DEFAULT 'UTC',
    ADD COLUMN revision       bigint NOT NULL DEFAULT 1,
    ADD COLUMN disabled_at    timestamptz,
    ADD COLUMN disabled_error text;
