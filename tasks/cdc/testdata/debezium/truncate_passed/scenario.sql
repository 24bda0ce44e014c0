-- scenario truncate_passed: TRUNCATE between two inserts, with the trigger property skipped.operations=none
-- database cs_dbz_truncate_passed; the trigger reads slot cs_dbz_truncate_passed and publication cs_dbz_truncate_passed
CREATE TABLE public.trunc (
  id integer PRIMARY KEY,
  v text NOT NULL
);
CREATE PUBLICATION cs_dbz_truncate_passed FOR TABLE public.trunc;
INSERT INTO public.trunc VALUES (1, 'one'), (2, 'two');
-- trigger evaluation 1 (snapshot): maxWait PT5S counted from the moment the slot exists, properties {skipped.operations=none}
--   -> batch changes-01: 2 records {r=2}
INSERT INTO public.trunc VALUES (3, 'three');
TRUNCATE public.trunc;
INSERT INTO public.trunc VALUES (4, 'four');
-- trigger evaluation 2 (stream): maxWait PT5S, properties {skipped.operations=none}
--   -> batch changes-02: 3 records {c=2, t=1}
-- trigger evaluation 3 (drained): maxWait PT5S, properties {skipped.operations=none}
--   -> no records
