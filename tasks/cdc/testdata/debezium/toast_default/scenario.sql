-- scenario toast_default: TOASTed text, jsonb and bytea (3.2 kB each, STORAGE EXTERNAL) unchanged by updates, REPLICA IDENTITY DEFAULT: snapshot of 2 rows; an update of another column, an update of the TOASTed text, an insert; then a delete
-- database cs_dbz_toast_default; the trigger reads slot cs_dbz_toast_default and publication cs_dbz_toast_default
CREATE TABLE public.docs (
  id integer PRIMARY KEY,
  status text NOT NULL,
  body text,
  meta jsonb,
  blob bytea
);
CREATE PUBLICATION cs_dbz_toast_default FOR TABLE public.docs;
ALTER TABLE public.docs ALTER COLUMN body SET STORAGE EXTERNAL, ALTER COLUMN meta SET STORAGE EXTERNAL,
  ALTER COLUMN blob SET STORAGE EXTERNAL;
INSERT INTO public.docs SELECT i, 'new', repeat(md5(i::text), 100), jsonb_build_object('pad', repeat(md5(i::text), 100)),
  decode(repeat(md5(i::text), 200), 'hex') FROM generate_series(1, 2) i;
-- trigger evaluation 1 (snapshot): maxWait PT5S counted from the moment the slot exists
--   -> batch changes-01: 2 records {r=2}
BEGIN;
UPDATE public.docs SET status = 'touched' WHERE id = 1;
UPDATE public.docs SET status = 'body changed', body = body || '!' WHERE id = 2;
INSERT INTO public.docs VALUES (3, 'small', 'short body', '{"small": true}', '\x03');
COMMIT;
-- trigger evaluation 2 (stream-1): maxWait PT5S
--   -> batch changes-02: 3 records {u=2, c=1}
DELETE FROM public.docs WHERE id = 1;
-- trigger evaluation 3 (stream-2): maxWait PT5S
--   -> batch changes-03: 1 records {d=1}
-- trigger evaluation 4 (drained): maxWait PT5S
--   -> no records
