-- scenario types: every supported PostgreSQL type, NOT NULL and nullable, with NULLs and extremes ClickHouse 18.16 can hold (REPLICA IDENTITY FULL): snapshot of 3 rows, then an insert, an update setting NULLs to values, one setting values to NULL, a delete
-- database cs_dbz_types; the trigger reads slot cs_dbz_types and publication cs_dbz_types
CREATE TABLE public.everything (
  id bigint PRIMARY KEY,
  i16 smallint NOT NULL,
  i16_n smallint,
  i32 integer NOT NULL,
  i32_n integer,
  i64 bigint NOT NULL,
  i64_n bigint,
  price numeric(12,2) NOT NULL,
  price_n numeric(12,2),
  num numeric NOT NULL,
  num_n numeric,
  f32 real NOT NULL,
  f32_n real,
  f64 double precision NOT NULL,
  f64_n double precision,
  flag boolean NOT NULL,
  flag_n boolean,
  txt text NOT NULL,
  txt_n text,
  code varchar(8) NOT NULL,
  code_n varchar(8),
  uid uuid NOT NULL,
  uid_n uuid,
  day date NOT NULL,
  day_n date,
  at timestamp NOT NULL,
  at_n timestamp,
  at_tz timestamptz NOT NULL,
  at_tz_n timestamptz,
  doc jsonb NOT NULL,
  doc_n jsonb,
  bin bytea NOT NULL,
  bin_n bytea
);
CREATE PUBLICATION cs_dbz_types FOR TABLE public.everything;
ALTER TABLE public.everything REPLICA IDENTITY FULL;
INSERT INTO public.everything VALUES
  (1, 1, NULL, 100, NULL, 1000, NULL, 12.50, NULL, 42, NULL, 1.5, NULL, 2.25, NULL, true, NULL,
   'plain', NULL, 'ab', NULL, '00000000-0000-0000-0000-000000000001', NULL, '2024-01-02', NULL,
   '2024-01-02 03:04:05', NULL, '2024-01-02 03:04:05+00', NULL, '{"a": 1}', NULL, '\x00', NULL),
  (2, -2, 2, -200, 200, -2000, 2000, -0.01, 99.99, 0.0000000001, -123.456, -0.5, 0.25, -1e-10, 3.0, false, false,
   'text 2', '', 'cd', 'xy', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '123e4567-e89b-12d3-a456-426614174000',
   '1970-01-01', '2000-02-29', '1970-01-01 00:00:00', '2038-01-19 03:14:08',
   '1999-12-31 23:59:59-08', '2000-01-01 00:00:00+01',
   '{"nested": {"b": [1, 2.5, "x", null, true]}, "é": "ü"}', '[]', '\xdeadbeef', '\x'),
  (3, -32768, 32767, -2147483648, 2147483647, -9223372036854775808, 9223372036854775807,
   -9999999999.99, 9999999999.99, 1234567890123456789012345678.1234567890, -0.5,
   3.4028235e38, 1.17549435e-38, 1.7976931348623157e308, 5e-324, true, true,
   'héllo ☃ 😀 "quoted" \ back', E'tab\tand\nnewline', 'ÄÖÜßéèêë', '😀😀', 'ffffffff-ffff-ffff-ffff-ffffffffffff',
   'FFFFFFFF-0000-0000-0000-00000000000F', '2149-06-06', '2100-12-31', '2106-02-07 06:28:15', '1970-01-01 00:00:01',
   '2106-02-07 06:28:15+00', '2024-06-30 23:59:59+02:00', '{"big": 12345678901234567890, "f": 1.0e+2, "s": "a\"b"}',
   '"just a string"', '\x000102ff', '\x7f');
-- trigger evaluation 1 (snapshot): maxWait PT5S counted from the moment the slot exists
--   -> batch changes-01: 3 records {r=3}
BEGIN;
INSERT INTO public.everything VALUES
  (4, 4, 44, 400, 440, 4000, 4400, 4.00, 0.00, 0, 0.000, 4.0, -4.0, 4.5, -4.5, false, true,
   'four', 'vier', 'dd', 'DD', '44444444-4444-4444-4444-444444444444', NULL,
   '2024-02-29', NULL, '2024-02-29 23:59:59', NULL, '2024-02-29 23:59:59-05', NULL,
   '{"four": 4}', NULL, '\x04', NULL);
UPDATE public.everything SET i16_n = 16, i32_n = 32, i64_n = 64, price_n = 1.25, num_n = 7.5,
  f32_n = 0.75, f64_n = 0.125, flag_n = true, txt_n = 'now set', code_n = 'set',
  uid_n = '11111111-1111-1111-1111-111111111111', day_n = '2030-01-01', at_n = '2030-01-01 00:00:00',
  at_tz_n = '2030-01-01 00:00:00+00', doc_n = '{"k": "v"}', bin_n = '\x01' WHERE id = 1;
UPDATE public.everything SET i16_n = NULL, i32_n = NULL, i64_n = NULL, price_n = NULL, num_n = NULL,
  f32_n = NULL, f64_n = NULL, flag_n = NULL, txt_n = NULL, code_n = NULL, uid_n = NULL, day_n = NULL,
  at_n = NULL, at_tz_n = NULL, doc_n = NULL, bin_n = NULL, txt = 'nulled' WHERE id = 2;
DELETE FROM public.everything WHERE id = 3;
COMMIT;
-- trigger evaluation 2 (stream): maxWait PT5S
--   -> batch changes-02: 4 records {c=1, u=2, d=1}
-- trigger evaluation 3 (drained): maxWait PT5S
--   -> no records
