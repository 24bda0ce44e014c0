-- scenario infinity: a timestamptz holding -infinity: the trigger's conversion throws and the evaluation fails (no batch, ever)
-- database cs_dbz_infinity; the trigger reads slot cs_dbz_infinity and publication cs_dbz_infinity
CREATE TABLE public.inf (
  id integer PRIMARY KEY,
  at_tz timestamptz
);
CREATE PUBLICATION cs_dbz_infinity FOR TABLE public.inf;
INSERT INTO public.inf VALUES (1, '2024-01-01 00:00:00+00'), (2, '-infinity');
-- trigger evaluation 1 (snapshot): maxWait PT5S counted from the moment the slot exists; expected to fail
--   -> no records (the connector had not streamed long enough to tell)
--   -> failed as expected: java.lang.IllegalStateException: cannot convert the record at offset {last_snapshot_record=true, lsn=51971427088, txId=7315, ts_usec=1796112764752917, snapshot=INITIAL, snapshot_completed=true} <- caused by: java.time.format.DateTimeParseException: Text '-infinity' could not be parsed at index 1
-- trigger evaluation 2 (snapshot again (no offsets were stored)): maxWait PT5S; expected to fail
--   -> no records (the connector had not streamed long enough to tell)
--   -> failed as expected: java.lang.IllegalStateException: cannot convert the record at offset {last_snapshot_record=true, lsn=51971483632, txId=7322, ts_usec=1796112766033572, snapshot=INITIAL, snapshot_completed=true} <- caused by: java.time.format.DateTimeParseException: Text '-infinity' could not be parsed at index 1
