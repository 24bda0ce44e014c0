-- scenario overlap_blocked: a transaction (with an xid) open while the first evaluation creates the slot: slot creation waits for it, the evaluation fails and leaks its engine; A's change lands in a later snapshot
-- database cs_dbz_overlap_blocked; the trigger reads slot cs_dbz_overlap_blocked and publication cs_dbz_overlap_blocked
CREATE TABLE public.overlap (
  id integer PRIMARY KEY,
  v text NOT NULL
);
CREATE PUBLICATION cs_dbz_overlap_blocked FOR TABLE public.overlap;
INSERT INTO public.overlap VALUES (1, 'one'), (2, 'two'), (3, 'three');
/* session A */ UPDATE public.overlap SET v = 'changed by A, open across slot creation' WHERE id = 1;
-- transaction A (xid 7056) stays open
-- trigger evaluation 1 (snapshot while A is open, the trigger's clock): maxWait PT5S; expected to fail
--   -> no records (the connector had not streamed long enough to tell)
--   -> failed as expected: java.lang.IllegalStateException: Cannot stop engine while tasks are starting, this may lead to leaked resource. Wait for the tasks to be fully started.
-- observed after the failed evaluation: the walsender of the engine that could not stop still waits for A's xid 7056; slot row: cs_dbz_overlap_blocked active=true pid=11508 confirmed_flush_lsn=null
/* session A */ COMMIT;
-- A committed (WAL insert position just before its commit: C/E769C90)
-- the leaked engine completed slot creation and snapshotted into a batch no flow receives: [op=r lsn=51782262008 txId=7084 snapshot=first sequence=[null,"51782262008"], op=r lsn=51782262008 txId=7084 snapshot=true sequence=[null,"51782262008"], op=r lsn=51782262008 txId=7084 snapshot=last sequence=[null,"51782262008"]]; slot row: active=true pid=11508 confirmed_flush_lsn=C/E769CF8
-- the harness stopped the leaked engine (in a Kestra worker it runs until its task start times out or it is stopped)
-- trigger evaluation 2 (snapshot again: the failed evaluation saved no offsets): maxWait PT5S
--   -> batch changes-01: 3 records {r=3}
UPDATE public.overlap SET v = 'after the snapshot' WHERE id = 2;
-- trigger evaluation 3 (stream): maxWait PT5S
--   -> batch changes-02: 1 records {u=1}
-- trigger evaluation 4 (drained): maxWait PT5S
--   -> no records
