-- scenario overlap_stream: transaction B begins while the slot is still being built (FULL_SNAPSHOT) and commits after the snapshot: B's early changes stream with LSNs below the snapshot rows'
-- database cs_dbz_overlap_stream; the trigger reads slot cs_dbz_overlap_stream and publication cs_dbz_overlap_stream
CREATE TABLE public.overlap (
  id integer PRIMARY KEY,
  v text NOT NULL
);
CREATE PUBLICATION cs_dbz_overlap_stream FOR TABLE public.overlap;
CREATE TABLE public.side (id integer);
INSERT INTO public.overlap VALUES (1, 'one'), (2, 'two'), (3, 'three');
/* session A */ INSERT INTO public.side VALUES (1);
-- A (xid 7202) open before the trigger starts
-- trigger evaluation 1 (snapshot while B is open) starts in the background: maxWait PT5S counted from the moment the scenario releases it
/* session C */ INSERT INTO public.side VALUES (2);
-- C (xid 7203) begins
/* session A */ COMMIT;
-- observed: slot creation now waits for C: it logged a running_xacts record after A ended (FULL_SNAPSHOT)
/* session B */ UPDATE public.overlap SET v = 'B, before the consistent point' WHERE id = 1;
/* session B */ INSERT INTO public.overlap VALUES (10, 'B, inserted before the consistent point');
-- B (xid 7205) changed keys 1 and 10; WAL insert position after them: C/148A8D00
/* session C */ COMMIT;
-- slot consistent point (confirmed_flush_lsn): C/148A8D70
/* session B */ UPDATE public.overlap SET v = 'B, after the snapshot' WHERE id = 2;
/* session B */ COMMIT;
-- B committed after the snapshot was read
--   -> batch changes-01: 6 records {r=3, u=2, c=1}
-- trigger evaluation 2 (stream): maxWait PT5S
--   -> no records
-- trigger evaluation 3 (drained): maxWait PT5S
--   -> no records
