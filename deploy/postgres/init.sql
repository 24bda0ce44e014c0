-- Runs once, when the compose stack's PostgreSQL volume is first initialised
-- (docker-entrypoint-initdb.d), as the superuser in database "shop" (POSTGRES_DB).

-- The source table of the cdc flow. REPLICA IDENTITY FULL makes every DELETE carry
-- the whole before image (with the default identity only the key is logged).
CREATE TABLE IF NOT EXISTS public.orders (
  id bigint PRIMARY KEY,
  customer_id bigint NOT NULL,
  amount_cents bigint NOT NULL,
  status text NOT NULL
);
ALTER TABLE public.orders REPLICA IDENTITY FULL;

-- The publication the Debezium trigger reads (publicationName in the flow). Created here so
-- the capture role needs no ownership of the table.
CREATE PUBLICATION kestra_clickhouse_orders FOR TABLE public.orders;

-- Capture role of the cdc flow's trigger (secrets CDC_POSTGRES_USERNAME/PASSWORD): it
-- creates and reads the logical replication slot and snapshots the table.
CREATE ROLE wal_reader LOGIN REPLICATION PASSWORD 'cdc-demo-pw';
GRANT SELECT ON public.orders TO wal_reader;

-- Role of the kafka-state flow (secrets KAFKA_STATE_USER/PASSWORD): `changesink kafka-state
-- setup` creates schema kafka_state in this database.
CREATE ROLE state_writer LOGIN PASSWORD 'kafka-state-demo-pw';
GRANT CREATE, CONNECT ON DATABASE shop TO state_writer;

-- Kestra's own repository and queue.
CREATE ROLE kestra LOGIN PASSWORD 'kestra';
CREATE DATABASE kestra OWNER kestra;
