-- 5: the board without scans of history or backlog (issue 11): trouble attempts in the
-- order the dashboard lists them, waiting jobs counted as they come and go

-- The trouble list is newest first by the time of the trouble; ordered by ended_at alone,
-- the index made the dashboard read and sort every trouble attempt ever recorded.
DROP INDEX taskboard_attempts_trouble;
CREATE INDEX taskboard_attempts_trouble ON taskboard_attempts
    ((coalesce(ended_at, renewal_failed_at, claimed_at)) DESC, id DESC)
    WHERE outcome IN ('completion_rejected', 'lease_lost') OR renewal_failed_at IS NOT NULL;

-- Waiting jobs (unleased and unfinished: the rows of taskboard_jobs_ready, scheduled ones
-- included) by queue and kind. The board's pending count and its kinds that no worker runs
-- read these few rows instead of every waiting job: the same cost at a backlog of a million
-- as at none. Each (queue, kind) has one or more slots whose sum is the count. A statement
-- adds to a slot no other transaction holds, and takes a new one when all are held: an
-- application's transaction that enqueued and stays open (or a handler's, which enqueued
-- and then runs for minutes) holds its slot to the end, and a counter shared by backend, as
-- taskboard_finished_counts is, would make every claim of that kind on a backend of that
-- shard wait for it. So no writer ever waits on a counter (nor deadlocks on one), and a
-- pair has no more slots than transactions ever held at once.
CREATE TABLE taskboard_waiting_counts (
    queue text   NOT NULL,
    kind  text   NOT NULL,
    slot  bigint GENERATED ALWAYS AS IDENTITY,
    n     bigint NOT NULL,
    PRIMARY KEY (queue, kind, slot)
);

-- Adds `delta` to one slot of (queue, kind) that no other transaction holds.
CREATE FUNCTION taskboard_add_waiting(d_queue text, d_kind text, delta bigint) RETURNS void
    LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    UPDATE taskboard_waiting_counts c SET n = c.n + delta
     WHERE (c.queue, c.kind, c.slot) = (
           SELECT s.queue, s.kind, s.slot FROM taskboard_waiting_counts s
            WHERE s.queue = d_queue AND s.kind = d_kind
            LIMIT 1 FOR UPDATE SKIP LOCKED);
    IF NOT FOUND THEN
        INSERT INTO taskboard_waiting_counts (queue, kind, n) VALUES (d_queue, d_kind, delta);
    END IF;
END $$;

-- One statement-level trigger per kind of change, as for the finished counts: what the
-- statement brought into the waiting set (enqueue, retry, release, snooze) minus what it
-- took out (claim, cancel, delete); a completion or a renewal touches no waiting row and
-- writes nothing. It runs as the schema's owner, so workers need no privilege on the
-- counters (taskboard_add_waiting runs as its caller: a worker calling it gets nothing).
CREATE FUNCTION taskboard_count_waiting() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        -- Rows need no pairing: what is waiting after minus what was waiting before.
        PERFORM taskboard_add_waiting(queue, kind, sum(delta))
           FROM (SELECT queue, kind, 1 AS delta FROM new_rows
                  WHERE lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL
                    AND cancelled_at IS NULL
                 UNION ALL
                 SELECT queue, kind, -1 FROM old_rows
                  WHERE lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL
                    AND cancelled_at IS NULL) d
          GROUP BY queue, kind
         HAVING sum(delta) <> 0;
    ELSIF TG_OP = 'INSERT' THEN
        PERFORM taskboard_add_waiting(queue, kind, count(*))
           FROM new_rows
          WHERE lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL
            AND cancelled_at IS NULL
          GROUP BY queue, kind;
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM taskboard_add_waiting(queue, kind, -count(*))
           FROM old_rows
          WHERE lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL
            AND cancelled_at IS NULL
          GROUP BY queue, kind;
    END IF;
    RETURN NULL;
END $$;

-- No write may fall between the first count and the triggers (it would be in neither):
-- writers wait for this lock, the one CREATE TRIGGER takes anyway, until the migration
-- commits.
LOCK TABLE taskboard_jobs IN SHARE ROW EXCLUSIVE MODE;
INSERT INTO taskboard_waiting_counts (queue, kind, n)
SELECT queue, kind, count(*)
  FROM taskboard_jobs
 WHERE lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL
   AND cancelled_at IS NULL
 GROUP BY queue, kind;

CREATE TRIGGER taskboard_count_waiting_update AFTER UPDATE ON taskboard_jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskboard_count_waiting();
CREATE TRIGGER taskboard_count_waiting_insert AFTER INSERT ON taskboard_jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskboard_count_waiting();
CREATE TRIGGER taskboard_count_waiting_delete AFTER DELETE ON taskboard_jobs
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskboard_count_waiting();
