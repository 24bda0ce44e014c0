-- scenario multichange: one transaction touching keys several times: key 1 updated 3 times; key 3 inserted, updated, deleted, inserted again; key 2 deleted and inserted again (REPLICA IDENTITY DEFAULT)
-- database cs_dbz_multichange; the trigger reads slot cs_dbz_multichange and publication cs_dbz_multichange
CREATE TABLE public.items (
  id integer PRIMARY KEY,
  qty integer NOT NULL,
  note text NOT NULL
);
CREATE PUBLICATION cs_dbz_multichange FOR TABLE public.items;
INSERT INTO public.items VALUES (1, 10, 'one'), (2, 20, 'two');
-- trigger evaluation 1 (snapshot): maxWait PT5S counted from the moment the slot exists
--   -> batch changes-01: 2 records {r=2}
BEGIN;
UPDATE public.items SET qty = qty + 1 WHERE id = 1;
UPDATE public.items SET qty = qty + 1 WHERE id = 1;
UPDATE public.items SET qty = qty + 1, note = 'one, third update' WHERE id = 1;
INSERT INTO public.items VALUES (3, 30, 'three');
UPDATE public.items SET qty = 31 WHERE id = 3;
DELETE FROM public.items WHERE id = 3;
INSERT INTO public.items VALUES (3, 32, 'three again');
DELETE FROM public.items WHERE id = 2;
INSERT INTO public.items VALUES (2, 22, 'two reborn');
COMMIT;
-- trigger evaluation 2 (stream): maxWait PT5S
--   -> batch changes-02: 9 records {u=4, c=3, d=2}
-- trigger evaluation 3 (drained): maxWait PT5S
--   -> no records
