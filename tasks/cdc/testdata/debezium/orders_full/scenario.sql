-- scenario orders_full: public.orders with REPLICA IDENTITY FULL: snapshot of 3 rows, then inserts, updates (one key twice in one transaction) and deletes in 3 transactions, then one more update
-- database cs_dbz_orders_full; the trigger reads slot cs_dbz_orders_full and publication cs_dbz_orders_full
CREATE TABLE public.orders (
  id bigint PRIMARY KEY,
  customer_id bigint NOT NULL,
  amount_cents bigint NOT NULL,
  status text NOT NULL
);
CREATE PUBLICATION cs_dbz_orders_full FOR TABLE public.orders;
ALTER TABLE public.orders REPLICA IDENTITY FULL;
INSERT INTO public.orders VALUES (1, 101, 1099, 'new'), (2, 102, 2099, 'new'), (3, 103, 3099, 'paid');
-- trigger evaluation 1 (snapshot): maxWait PT5S counted from the moment the slot exists
--   -> batch changes-01: 3 records {r=3}
BEGIN;
INSERT INTO public.orders VALUES (4, 104, 4099, 'new');
INSERT INTO public.orders VALUES (5, 105, 5099, 'new');
COMMIT;
BEGIN;
UPDATE public.orders SET status = 'paid', amount_cents = amount_cents + 1 WHERE id = 1;
UPDATE public.orders SET status = 'shipped', amount_cents = amount_cents + 1 WHERE id = 1;
UPDATE public.orders SET amount_cents = 4000 WHERE id = 4;
COMMIT;
BEGIN;
DELETE FROM public.orders WHERE id = 2;
DELETE FROM public.orders WHERE id = 5;
COMMIT;
-- trigger evaluation 2 (stream-1): maxWait PT5S
--   -> batch changes-02: 7 records {c=2, u=3, d=2}
UPDATE public.orders SET status = 'cancelled' WHERE id = 3;
-- trigger evaluation 3 (stream-2): maxWait PT5S
--   -> batch changes-03: 1 records {u=1}
-- trigger evaluation 4 (drained): maxWait PT5S
--   -> no records
