-- scenario defaults: nullable columns with a DEFAULT holding explicit NULLs (snapshot and streamed inserts/updates)
-- database cs_dbz_defaults; the trigger reads slot cs_dbz_defaults and publication cs_dbz_defaults
CREATE TABLE public.defaulted (
  id integer PRIMARY KEY,
  note text DEFAULT 'dflt',
  qty integer DEFAULT 7,
  flag boolean DEFAULT true
);
CREATE PUBLICATION cs_dbz_defaults FOR TABLE public.defaulted;
INSERT INTO public.defaulted VALUES (1, NULL, NULL, NULL), (2, 'set', 2, false);
INSERT INTO public.defaulted (id) VALUES (3);
-- trigger evaluation 1 (snapshot): maxWait PT5S counted from the moment the slot exists
--   -> batch changes-01: 3 records {r=3}
INSERT INTO public.defaulted VALUES (4, NULL, NULL, NULL);
UPDATE public.defaulted SET note = NULL, qty = NULL, flag = NULL WHERE id = 2;
-- trigger evaluation 2 (stream): maxWait PT5S
--   -> batch changes-02: 2 records {c=1, u=1}
-- trigger evaluation 3 (drained): maxWait PT5S
--   -> no records
