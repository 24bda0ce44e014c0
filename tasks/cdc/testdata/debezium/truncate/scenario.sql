-- scenario truncate: TRUNCATE between two inserts, the seed's settings (Debezium's default skipped.operations=t)
-- database cs_dbz_truncate; the trigger reads slot cs_dbz_truncate and publication cs_dbz_truncate
CREATE TABLE public.trunc (
  id integer PRIMARY KEY,
  v text NOT NULL
);
CREATE PUBLICATION cs_dbz_truncate FOR TABLE public.trunc;
INSERT INTO public.trunc VALUES (1, 'one'), (2, 'two');
-- trigger evaluation 1 (snapshot): maxWait PT5S counted from the moment the slot exists
--   -> batch changes-01: 2 records {r=2}
INSERT INTO public.trunc VALUES (3, 'three');
TRUNCATE public.trunc;
INSERT INTO public.trunc VALUES (4, 'four');
-- trigger evaluation 2 (stream): maxWait PT5S
--   -> batch changes-02: 2 records {c=2}
-- trigger evaluation 3 (drained): maxWait PT5S
--   -> no records
