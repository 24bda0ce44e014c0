package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/changesink/changesink/bench/internal/benchrun"
	"github.com/jackc/pgx/v5"
)

// tables are the source tables: a shop's customers, orders and order
// lines, 7 to 10 columns of the usual types (text, numeric, timestamptz,
// boolean), 90 to 250 bytes a row.
var tables = []struct{ name, ddl string }{
	{"customers", `CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, email text NOT NULL,
		country text NOT NULL, city text, created_at timestamptz NOT NULL, score numeric(10,2), active boolean NOT NULL,
		tags text)`},
	{"orders", `CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint NOT NULL, status text NOT NULL,
		total numeric(12,2) NOT NULL, currency text NOT NULL, items int NOT NULL, created_at timestamptz NOT NULL,
		updated_at timestamptz, shipping_address text, note text)`},
	{"order_lines", `CREATE TABLE order_lines (order_id bigint NOT NULL, line int NOT NULL, sku text NOT NULL,
		qty int NOT NULL, unit_price numeric(12,2) NOT NULL, discount numeric(5,2), PRIMARY KEY (order_id, line))`},
}

// round is one source transaction of k*10 changes: 5k inserts (k
// customers, 2k orders, 2k order lines), 4k updates (the previous
// round's 2k orders, k customers and k of its order lines) and k deletes
// (order lines of the round before it).
var round = []struct {
	sql   string
	first int // the round this statement starts in
}{
	{`INSERT INTO customers SELECT g, 'customer ' || g, 'customer' || g || '@example.com', (ARRAY['DE','FR','US','JP','BR'])[1 + g % 5],
		'city ' || (g % 997), '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 minute', (g % 10000) / 100.0, g % 7 <> 0,
		CASE WHEN g % 3 = 0 THEN 'vip,newsletter' END
		FROM generate_series($1::bigint * $2::bigint + 1, ($1::bigint + 1) * $2::bigint) g`, 0},
	{`INSERT INTO orders SELECT g, 1 + (g * 7919) % (($1::bigint + 1) * $2::bigint), 'new', (g % 100000) / 10.0 + 0.99, 'EUR', 1 + g % 9,
		'2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second', NULL,
		g || ' Market Street, Suite ' || (g % 400) || ', 75001 Paris, France', CASE WHEN g % 4 = 0 THEN 'leave at the door' END
		FROM generate_series($1::bigint * 2 * $2::bigint + 1, ($1::bigint + 1) * 2 * $2::bigint) g`, 0},
	{`INSERT INTO order_lines SELECT g, 1, 'SKU-' || lpad((g % 50000)::text, 6, '0'), 1 + g % 5, (g % 20000) / 100.0 + 0.5,
		CASE WHEN g % 10 = 0 THEN 5.00 END
		FROM generate_series($1::bigint * 2 * $2::bigint + 1, ($1::bigint + 1) * 2 * $2::bigint) g`, 0},
	{`UPDATE orders SET status = 'paid', total = total + 1.00, updated_at = created_at + interval '1 hour'
		WHERE id BETWEEN ($1::bigint - 1) * 2 * $2::bigint + 1 AND $1::bigint * 2 * $2::bigint`, 1},
	{`UPDATE customers SET score = score + 1.5, city = city || ' (moved)' WHERE id BETWEEN ($1::bigint - 1) * $2::bigint + 1 AND $1::bigint * $2::bigint`, 1},
	{`UPDATE order_lines SET qty = qty + 1 WHERE order_id BETWEEN ($1::bigint - 1) * 2 * $2::bigint + 1 AND ($1::bigint - 1) * 2 * $2::bigint + $2::bigint`, 1},
	{`DELETE FROM order_lines WHERE order_id BETWEEN ($1::bigint - 2) * 2 * $2::bigint + $2::bigint + 1 AND ($1::bigint - 1) * 2 * $2::bigint`, 2},
}

// counts are the changes written, by kind.
type counts struct{ inserts, updates, deletes, transactions int64 }

func (c counts) total() int64 { return c.inserts + c.updates + c.deletes }

// write makes the changes: rounds of txChanges changes each (the first
// two rounds fewer: nothing to update or delete yet) until about want
// changes; it returns what it wrote and the WAL position after it.
func write(ctx context.Context, dsn string, want, txChanges int) (counts, string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return counts{}, "", err
	}
	defer conn.Close(context.Background())
	k := max(txChanges/10, 1)
	var c counts
	for r := 0; c.total() < int64(want); r++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for _, st := range round {
				if r < st.first {
					continue
				}
				tag, err := tx.Exec(ctx, st.sql, r, k)
				if err != nil {
					return fmt.Errorf("round %d: %.60s: %w", r, strings.Join(strings.Fields(st.sql), " "), err)
				}
				switch {
				case tag.Insert():
					c.inserts += tag.RowsAffected()
				case tag.Update():
					c.updates += tag.RowsAffected()
				case tag.Delete():
					c.deletes += tag.RowsAffected()
				}
			}
			return nil
		})
		if err != nil {
			return c, "", err
		}
		c.transactions++
	}
	var end string
	err = conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&end)
	return c, end, err
}

// createSource makes the tables and the publication in the new database.
func createSource(ctx context.Context, dsn, pub string) error {
	var names []string
	stmts := []string{}
	for _, t := range tables {
		stmts = append(stmts, t.ddl)
		names = append(names, "public."+t.name)
	}
	stmts = append(stmts, "CREATE PUBLICATION "+pub+" FOR TABLE "+strings.Join(names, ", "))
	return benchrun.ExecSQL(ctx, dsn, stmts...)
}

// rowCounts returns each table's row count on the source.
func rowCounts(ctx context.Context, dsn string) (map[string]int64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	out := map[string]int64{}
	for _, t := range tables {
		var n int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+t.name).Scan(&n); err != nil {
			return nil, err
		}
		out[t.name] = n
	}
	return out, nil
}

// sweep drops what this benchmark left on the servers: its slots no
// process holds, its source databases and its ClickHouse databases. The
// caller holds the benchmark's lock; a database whose slot is still in use
// (a process of a killed run, still creating it) is left, and said so.
func sweep(ctx context.Context, admin string, ch func(string) (string, error)) error {
	if err := benchrun.ExecSQL(ctx, admin, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
		WHERE slot_name LIKE 'bench\_sync\_%' AND NOT active`); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT datname, EXISTS (SELECT FROM pg_replication_slots s WHERE s.database = datname AND s.active)
		FROM pg_database WHERE datname LIKE 'bench\_sync\_%'`)
	if err != nil {
		return err
	}
	type db struct {
		Name string
		Busy bool
	}
	dbs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[db])
	if err != nil {
		return err
	}
	var busy []string
	for _, d := range dbs {
		if d.Busy {
			fmt.Printf("bench-sync: left %s (and its ClickHouse databases): a slot of it is in use, a killed run's process\n", d.Name)
			busy = append(busy, d.Name+"_")
			continue
		}
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+d.Name+" WITH (FORCE)"); err != nil {
			return err
		}
	}
	out, err := ch(`SELECT name FROM system.databases WHERE name LIKE 'bench\\_sync\\_%'`)
	if err != nil {
		return err
	}
	for _, name := range strings.Fields(out) {
		if slices.ContainsFunc(busy, func(prefix string) bool { return strings.HasPrefix(name, prefix) }) {
			continue
		}
		if _, err := ch("DROP DATABASE IF EXISTS " + name); err != nil {
			return err
		}
	}
	return nil
}
