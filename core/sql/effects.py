"""The records of external effects (a charge, a send): written on their own, never in the
handler's transaction, so what the outside world saw outlives the attempt's fate; and read
back for `history`, the job detail and the dashboard's effects panel."""

from __future__ import annotations

from typing import Final, LiteralString

# A later attempt that meets the same PaymentIntent (a replay by its Idempotency-Key) only
# updates the status: the record keeps the attempt and worker that moved the money.
RECORD_CHARGE: Final[LiteralString] = """
INSERT INTO taskboard_billing_charges
       (job_id, payment_intent_id, amount, currency, customer, attempt, worker_id, status)
VALUES (%(job_id)s, %(payment_intent)s, %(amount)s, %(currency)s, %(customer)s,
        %(attempt)s, %(worker_id)s, %(status)s)
ON CONFLICT (payment_intent_id) DO UPDATE SET status = excluded.status
"""

# One row per accepted recipient. Written again after an answer that never came (the first
# may have committed): the same copy is the same row.
RECORD_SENDS: Final[LiteralString] = """
INSERT INTO taskboard_email_sends (job_id, attempt, message_id, recipient, worker_id)
SELECT %(job_id)s, %(attempt)s, %(message_id)s, r, %(worker_id)s
  FROM unnest(%(recipients)s::text[]) r
ON CONFLICT DO NOTHING
"""

JOB_CHARGES: Final[LiteralString] = """
SELECT payment_intent_id AS payment_intent, amount, currency, customer, recorded_at,
       attempt, worker_id, status
  FROM taskboard_billing_charges WHERE job_id = %(id)s ORDER BY recorded_at, payment_intent_id
"""

JOB_SENDS: Final[LiteralString] = """
SELECT sent_at, message_id, recipient, attempt, worker_id
  FROM taskboard_email_sends WHERE job_id = %(id)s ORDER BY sent_at, attempt, recipient
"""

# The dashboard's view of sends, from the records (any relay, any process): the latest
# Message-IDs, each with how many attempts sent it; more than one is a duplicate.
RECENT_SENDS: Final[LiteralString] = """
SELECT max(sent_at) AS at, message_id, min(recipient) AS recipient, min(job_id) AS job_id,
       count(DISTINCT attempt)::int AS attempts
  FROM (SELECT * FROM taskboard_email_sends ORDER BY sent_at DESC LIMIT %(limit)s) s
 GROUP BY message_id
 ORDER BY max(sent_at) DESC
"""

# Finished but not completed (cancelled or dead) jobs that have an effect on record: money
# moved or mail went out for a job the queue says did not happen. Among the latest 1000
# records of each kind (through their time indexes), whatever the tables' size.
EFFECTS_OF_UNCOMPLETED: Final[LiteralString] = """
SELECT j.id AS job_id, j.kind,
       CASE WHEN j.cancelled_at IS NOT NULL THEN 'cancelled' ELSE 'dead' END AS state,
       coalesce(j.cancelled_at, j.failed_at) AS finished_at,
       (SELECT count(*) FROM taskboard_billing_charges c
         WHERE c.job_id = j.id AND c.status = 'succeeded')::int AS charges,
       (SELECT count(*) FROM taskboard_email_sends s WHERE s.job_id = j.id)::int AS sends
  FROM taskboard_jobs j
 WHERE j.id = ANY (ARRAY(
           (SELECT job_id FROM taskboard_billing_charges WHERE status = 'succeeded'
             ORDER BY recorded_at DESC LIMIT 1000)
           UNION
           (SELECT job_id FROM taskboard_email_sends ORDER BY sent_at DESC LIMIT 1000)))
   AND j.completed_at IS NULL AND (j.cancelled_at IS NOT NULL OR j.failed_at IS NOT NULL)
 ORDER BY coalesce(j.cancelled_at, j.failed_at) DESC
 LIMIT %(limit)s
"""
