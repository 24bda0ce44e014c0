-- scenario types_edge: values only current ClickHouse servers hold, or none: microseconds, non-UTC offsets, dates before 1970 and after 2149, numeric NaN, float NaN/Infinity/-0, tiny and huge unconstrained numerics, timestamp infinity; snapshot then the same rows again as streamed inserts
-- database cs_dbz_types_edge; the trigger reads slot cs_dbz_types_edge and publication cs_dbz_types_edge
CREATE TABLE public.edge (
  id integer PRIMARY KEY,
  at timestamp,
  at_tz timestamptz,
  day date,
  num numeric,
  price numeric(6,3),
  f32 real,
  f64 double precision
);
CREATE PUBLICATION cs_dbz_types_edge FOR TABLE public.edge;
INSERT INTO public.edge VALUES
  (1, '2024-02-29 12:34:56.123456', '2024-02-29 12:34:56.123456+05:30', '1969-12-31', 'NaN', 1.5, 'NaN', 'Infinity'),
  (2, '1900-01-01 00:00:00.000001', '1970-01-01 00:00:00.5-03:00', '1900-01-01', 0.00000000000000000001, -0.001, 0.1, '-0'),
  (3, '1969-12-31 23:59:59.999999', '2024-01-01 00:00:00+14', '2149-06-07', 123456789012345678901234567890.123456789, 999.999, '-Infinity', 5e-324),
  (4, 'infinity', NULL, NULL, -1e30, NULL, 16777217, 0.1);
-- trigger evaluation 1 (snapshot): maxWait PT5S counted from the moment the slot exists
--   -> batch changes-01: 4 records {r=4}
INSERT INTO public.edge SELECT id + 10, at, at_tz, day, num, price, f32, f64 FROM public.edge WHERE id <= 4;
-- trigger evaluation 2 (stream): maxWait PT5S
--   -> batch changes-02: 4 records {c=4}
-- trigger evaluation 3 (drained): maxWait PT5S
--   -> no records
