-- 12: a job carries its trace (issue 29). The W3C trace context of whoever enqueued it
-- (`traceparent`, `tracestate` as the headers spell them), so every attempt, on any machine
-- and however late, joins the enqueuer's trace. NULL: enqueued with no tracing configured
-- (or before this migration); its attempts then start traces of their own. A schedule keeps
-- the context it was added under, and the jobs it fires link to it.
ALTER TABLE taskboard_jobs ADD COLUMN traceparent text, ADD COLUMN tracestate text;
ALTER TABLE taskboard_schedules ADD COLUMN traceparent text, ADD COLUMN tracestate text;
