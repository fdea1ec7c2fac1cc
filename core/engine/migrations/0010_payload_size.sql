-- 10: payload sizes (issue 22 item 6): every row knows its payload's size, and the schema
-- refuses payloads over a ceiling, so rows written by hand cannot stall a queue.

-- The size of the payload's text, which is what a claim returns: the claim adds rows while
-- their sizes fit its byte budget, reading this column instead of the payload (reading the
-- payload would fetch it from TOAST, the very cost being bounded). Nullable, no default:
-- adding it rewrites nothing, whatever the table's size.
ALTER TABLE taskboard_jobs ADD COLUMN payload_bytes integer;

-- Unfinished rows may still be claimed: measure them once now. Finished ones stay NULL
-- (a claim counts their stored size if they are retried). This runs before the trigger
-- exists, so rows already over the ceiling are measured, not refused: they are put aside
-- by the first claim that meets them instead (see core/sql/claim.py).
UPDATE taskboard_jobs SET payload_bytes = octet_length(payload::text)
 WHERE completed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL;

-- A trigger, not a CHECK: a constraint is checked on every update of a row, so a row over
-- the ceiling written before this migration would make its claim and its quarantine fail
-- alike; the trigger fires only when the payload itself is written. The ceiling is twice
-- the largest limit a kind may be configured with (MAX_PAYLOAD_LIMIT, 8 MiB, in
-- core/kinds/registry.py): enqueue measures compact JSON, this the database's text, which
-- adds a space after each ':' and ','; a payload its kind accepted is never refused here.
CREATE FUNCTION taskboard_payload_size() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.payload_bytes := pg_catalog.octet_length(NEW.payload::pg_catalog.text);
    IF NEW.payload_bytes > 16777216 THEN
        RAISE EXCEPTION USING ERRCODE = 'program_limit_exceeded',
            MESSAGE = pg_catalog.format(
                'payload of a %s job is %s bytes, over the ceiling of 16777216 bytes',
                pg_catalog.quote_literal(NEW.kind), NEW.payload_bytes);
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER taskboard_jobs_payload_size
    BEFORE INSERT OR UPDATE OF payload, payload_bytes ON taskboard_jobs
    FOR EACH ROW EXECUTE FUNCTION taskboard_payload_size();
