-- 4: what each attempt took, for lease advice and trends (issue 13)

-- Pickup: from when the job was due to its claim (database clock). Handler: the handler's
-- run as its worker timed it. Margin: the least lease time the worker had left when it
-- renewed (a lease that is nearly run out at renewals is too short for the kind).
ALTER TABLE taskboard_attempts
    ADD COLUMN pickup_seconds     double precision,
    ADD COLUMN handler_seconds    double precision,
    ADD COLUMN min_margin_seconds double precision;
