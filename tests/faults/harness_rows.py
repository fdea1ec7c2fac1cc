"""The rows and statements the fault harness writes by hand: the poison trigger, the
malformed rows, the unknown kind, and the sampler's query."""

from __future__ import annotations

# Claims of these rows are refused by a trigger the harness installs: a row that makes the
# claim statement itself fail, whatever the engine does (a corrupt value, a constraint).
POISON_SETUP: tuple[str, ...] = (
    "CREATE TABLE IF NOT EXISTS taskboard_fault_poison (id bigint PRIMARY KEY)",
    """CREATE OR REPLACE FUNCTION taskboard_fault_refuse_claim() RETURNS trigger
       LANGUAGE plpgsql AS $$
       BEGIN
         IF NEW.lease_token IS NOT NULL AND NEW.lease_token IS DISTINCT FROM OLD.lease_token
            AND EXISTS (SELECT 1 FROM taskboard_fault_poison p WHERE p.id = NEW.id) THEN
           RAISE EXCEPTION 'poison row % refuses every claim', NEW.id;
         END IF;
         RETURN NEW;
       END $$""",
    "DROP TRIGGER IF EXISTS taskboard_fault_refuse_claim ON taskboard_jobs",
    """CREATE TRIGGER taskboard_fault_refuse_claim BEFORE UPDATE ON taskboard_jobs
       FOR EACH ROW EXECUTE FUNCTION taskboard_fault_refuse_claim()""",
)

# Jobs a worker with a free slot could claim right now (the poison rows are quarantined by
# the first claim that meets them; a paused queue is nobody's to claim from), and every
# live worker's heartbeat age and load.
SAMPLE_QUERY = """
SELECT (SELECT count(*) FROM taskboard_jobs
         WHERE kind = ANY(%s) AND completed_at IS NULL AND failed_at IS NULL
           AND cancelled_at IS NULL AND attempts < max_attempts
           AND id NOT IN (SELECT id FROM taskboard_fault_poison)
           AND queue NOT IN (SELECT name FROM taskboard_queues WHERE paused_at IS NOT NULL)
           AND ((lease_token IS NULL AND run_at <= now())
                OR lease_expires_at <= now() - interval '0.2 seconds')),
       (SELECT json_object_agg(id, json_build_array(
                   extract(epoch FROM now() - heartbeat_at), in_flight, capacity, state))
          FROM taskboard_workers WHERE stopped_at IS NULL)
"""

# Rows written by hand, past enqueue validation: each must end dead with a reason.
MALFORMED_ROWS: tuple[tuple[str, str], ...] = (
    ("noop", '{"unexpected": 1}'),
    ("sleep", '"soon"'),
    ("sleep", '{"seconds": -3}'),
    ("email", '{"to": 5, "subject": "x", "text": "y"}'),
    ("email", "null"),
    ("billing", "[1, 2, 3]"),
    ("billing", '{"customer": "bob", "amount": 1.5, "currency": "usd"}'),
)
# Rows of kinds no worker runs (a newer release's): they must wait untouched, not die.
UNKNOWN_KIND_ROWS: tuple[tuple[str, str], ...] = (("teleport", "{}"),)
