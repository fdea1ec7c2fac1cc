-- 16: a child waiting on its parents leaves the ready index (issue 28: jobs without
-- dependencies pay nothing for them). Until now a waiting child was parked at run_at
-- 9999-01-01 inside taskboard_jobs_ready, so a claim of a queue with fewer due jobs than its
-- limit walked past every parked child of that queue, and a chain of 1,000 made each claim
-- of its queue read 1,000 more index entries. The children keep their parking (every
-- reader that goes by run_at still reads them as not due); the index no longer holds them,
-- and every statement that reads it says `waiting_on = 0` so its planner may use it.
-- Rebuilding the index locks taskboard_jobs against writes for as long as it takes (a
-- second at a few million unfinished rows; the index holds only unleased, unfinished jobs).
DROP INDEX taskboard_jobs_ready;
CREATE INDEX taskboard_jobs_ready ON taskboard_jobs (queue, priority DESC, run_at, id)
    WHERE lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL
      AND cancelled_at IS NULL AND waiting_on = 0;

-- The waiting children themselves, for the counts that still include them (the board's
-- "scheduled": parked, not due) without a scan of the table.
CREATE INDEX taskboard_jobs_waiting_on_parents ON taskboard_jobs (queue, id)
    WHERE waiting_on > 0 AND lease_token IS NULL AND completed_at IS NULL
      AND failed_at IS NULL AND cancelled_at IS NULL;
