package slotsync

import (
	"context"
	"testing"
	"time"
)

// TestSyncEndToEnd: setup loads the table from the new slot's snapshot,
// sync applies inserts, updates (one leaving a TOASTed column unchanged,
// one changing the key, one to NULL) and deletes, and a second sync finds
// nothing new; after each, the live view equals the source row by row.
//
//changesink:per-server
func TestSyncEndToEnd(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.items"}
	e.exec(`CREATE TABLE items (id bigint PRIMARY KEY, qty int NOT NULL, price numeric(12,2), name text, note text)`,
		`ALTER TABLE items ALTER COLUMN note SET STORAGE EXTERNAL`,
		`INSERT INTO items SELECT i, i*10, i*1.5, 'item '||i, NULL FROM generate_series(1, 5) i`,
		`UPDATE items SET note = (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 200) g) WHERE id = 3`)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := SetupSync(ctx, cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || res.Loaded != 5 {
		t.Fatalf("setup: %+v", res)
	}
	// Decimals compared in cents: 26.9 prints 1.50 as 1.5, 18.16 as 1.50.
	const pgSQL = `SELECT id::text, qty::text, (price * 100)::bigint::text, name, md5(note) FROM items ORDER BY items.id`
	chSQL := `SELECT id, qty, toString(toInt64(price * 100)), name, lower(hex(MD5(note))) FROM ` + e.chDB + `.items_live ORDER BY id`
	e.same(pgSQL, chSQL)

	e.exec(`INSERT INTO items VALUES (6, 60, 9.99, 'six', NULL), (7, 70, NULL, 'seven', 'x')`,
		`UPDATE items SET qty = 31 WHERE id = 3`, // note unchanged: a TOASTed value not sent
		`UPDATE items SET id = 20 WHERE id = 2`,
		`UPDATE items SET price = NULL, name = NULL WHERE id = 4`,
		`DELETE FROM items WHERE id = 5`)
	sres, err := Sync(ctx, cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	if sres.Transactions != 5 || sres.Why != "caught up" || len(sres.Tables) != 1 {
		t.Errorf("sync: %+v", sres)
	}
	t.Log(sres.Summary())
	e.same(pgSQL, chSQL)

	again, err := Sync(ctx, cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	if again.Transactions != 0 || again.Why != "caught up" {
		t.Errorf("a sync with nothing new: %+v", again)
	}
	e.same(pgSQL, chSQL)
}

// TestSyncKeyChangeKeepsToast: an update that changes the key sends the
// new row without its unchanged TOASTed values; they are the old key's,
// from the same transaction, the flush, or the target.
func TestSyncKeyChangeKeepsToast(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.acc"}
	e.exec(`CREATE TABLE acc (id bigint PRIMARY KEY, v bigint NOT NULL, blob text)`,
		`ALTER TABLE acc ALTER COLUMN blob SET STORAGE EXTERNAL`,
		`INSERT INTO acc SELECT i, i, repeat(md5(i::text), 100) FROM generate_series(1, 4) i`)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.exec(`UPDATE acc SET id = 10 WHERE id = 1`, // from the target
		`UPDATE acc SET v = 20 WHERE id = 2`, `UPDATE acc SET id = 20 WHERE id = 2`, // from the flush, itself unchanged
		`BEGIN; UPDATE acc SET v = 30 WHERE id = 3; UPDATE acc SET id = 30 WHERE id = 3; COMMIT`) // from the transaction
	if _, err := Sync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.same(`SELECT id::text, v::text, md5(blob) FROM acc ORDER BY acc.id`,
		`SELECT id, v, lower(hex(MD5(blob))) FROM `+e.chDB+`.acc_live ORDER BY id`)
}
