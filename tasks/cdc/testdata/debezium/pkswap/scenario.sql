-- scenario pkswap: a DEFERRABLE primary key with REPLICA IDENTITY FULL; one UPDATE swaps keys 6 and 7
-- database cs_dbz_pkswap; the trigger reads slot cs_dbz_pkswap and publication cs_dbz_pkswap
CREATE TABLE public.swap (
  id integer NOT NULL,
  v text NOT NULL
);
CREATE PUBLICATION cs_dbz_pkswap FOR TABLE public.swap;
ALTER TABLE public.swap ADD CONSTRAINT swap_pkey PRIMARY KEY (id) DEFERRABLE;
ALTER TABLE public.swap REPLICA IDENTITY FULL;
INSERT INTO public.swap VALUES (5, 'five'), (6, 'six'), (7, 'seven'), (8, 'eight');
-- trigger evaluation 1 (snapshot): maxWait PT5S counted from the moment the slot exists
--   -> batch changes-01: 4 records {r=4}
UPDATE public.swap SET id = CASE id WHEN 6 THEN 7 WHEN 7 THEN 6 END WHERE id IN (6, 7);
-- trigger evaluation 2 (stream): maxWait PT5S
--   -> batch changes-02: 4 records {d=2, c=2}
-- trigger evaluation 3 (drained): maxWait PT5S
--   -> no records
