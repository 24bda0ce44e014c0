package cdc

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/changesink/changesink/internal/iongen"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// TestSyncTakesOverATriggerTarget follows docs/cdc-sync.md's switch-over
// from the trigger flow (cdc apply of the Debezium trigger's batches) to
// cdc sync on the same target: the trigger flow loaded the table from its
// snapshot and applied two batches, then was stopped with changes it had
// not delivered (an update, a delete, an insert); cdc setup with a mapping
// entry naming the trigger flow's target creates the slot and loads the
// table from its snapshot into that target, where the trigger flow's rows
// are older; cdc sync streams from there. After the setup and after each
// sync, the live view equals the source row by row: the undelivered delete
// included (its key is not in the snapshot). A batch of the trigger flow
// applied late (the trigger disabled after one more poll) is refused
// (ErrWentBackwards: its versions are below the snapshot's) and changes
// nothing.
//
//changesink:per-server
func TestSyncTakesOverATriggerTarget(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.orders"}
	e.exec(`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint NOT NULL, amount_cents bigint NOT NULL, status text NOT NULL)`,
		`INSERT INTO orders SELECT i, 10 + i, 100 * i, 'new' FROM generate_series(1, 6) i`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The trigger flow: its target set up by cdc setup from the shipped
	// mapping, its batches with the source's own LSNs.
	a := &env{t: t, url: e.chURL, conn: e.ch.conn, db: e.chDB, m: loadMapping(t, ordersMapping)}
	a.m.Target.Database, a.m.Target.CreateDatabase = e.chDB, false
	a.setup()
	lsn := func() int64 {
		l, err := pglogrepl.ParseLSN(e.rows(`SELECT pg_current_wal_lsn()::text`)[0])
		if err != nil {
			t.Fatal(err)
		}
		return int64(l)
	}
	row := func(id int64) iongen.Struct {
		f := strings.Split(e.rows(fmt.Sprintf(`SELECT customer_id::text, amount_cents::text, status FROM orders WHERE id = %d`, id))[0], "\t")
		c, err1 := strconv.ParseInt(f[0], 10, 64)
		amt, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatal(f)
		}
		return orderRow(id, c, amt, f[2])
	}
	streamed := func(op string, r iongen.Struct, at int64) iongen.Struct {
		return iongen.Event(r, op == "DELETE", iongen.TriggerMetadata(op, iongen.TriggerSource("shop", "public", "orders", at, at, "false")))
	}
	apply := func(events ...any) {
		t.Helper()
		if _, err := testApply(ctx, a.config(writeFile(t, "changes.ion", encode(t, false, events...)))); err != nil {
			t.Fatal(err)
		}
	}
	snap := lsn()
	var reads []any
	for id := int64(1); id <= 6; id++ {
		mark := "true"
		if id == 6 {
			mark = "last"
		}
		reads = append(reads, iongen.Event(row(id), false, iongen.Metadata("READ", iongen.Source("shop", "public", "orders", snap, 1, mark))))
	}
	apply(reads...)
	e.exec(`UPDATE orders SET status = 'paid', amount_cents = 150 WHERE id = 1`)
	upd := streamed("UPDATE", row(1), lsn())
	e.exec(`DELETE FROM orders WHERE id = 2`)
	del := streamed("DELETE", orderRow(2, int64(0), int64(0), ""), lsn())
	apply(upd, del)
	// Changes the trigger flow never delivered before it was disabled.
	e.exec(`UPDATE orders SET status = 'shipped' WHERE id = 3`)
	late := []any{streamed("UPDATE", row(3), lsn())}
	e.exec(`DELETE FROM orders WHERE id = 4`)
	late = append(late, streamed("DELETE", orderRow(4, int64(0), int64(0), ""), lsn()))
	e.exec(`INSERT INTO orders VALUES (7, 17, 700, 'new')`)
	late = append(late, streamed("CREATE", row(7), lsn()))

	// The switch: a mapping entry naming the trigger flow's target.
	set, err := mapping.ParseSet("sync.yaml", []byte(`defaults: {target: {database: `+e.chDB+`}}
tables:
  - source: {database: `+e.slot+`, schema: public, table: orders}
    target: {table: orders_cdc, live_view: orders_live, version_column: _cdc_lsn, deleted_column: _cdc_deleted}
    key: [id]
    columns:
      - {name: id, type: Int64}
      - {name: customer_id, type: Int64}
      - {name: amount_cents, type: Int64}
      - {name: status, type: String, max_length: 32}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, senv := e.config()
	cfg.Mappings = set
	res, err := SetupSync(ctx, cfg, senv)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || res.Loaded != 5 || len(res.Tables) != 1 || res.Tables[0].Target != mapping.Qualified(e.chDB, "orders_cdc") {
		t.Fatalf("setup: %+v", res)
	}
	const pgSQL = `SELECT id::text, customer_id::text, amount_cents::text, status FROM orders ORDER BY id`
	chSQL := `SELECT id, customer_id, amount_cents, status FROM ` + e.chDB + `.orders_live ORDER BY id`
	e.same(pgSQL, chSQL)

	// The trigger's last poll, applied after the switch: older than the
	// snapshot, it is refused, and changes nothing.
	_, err = testApply(ctx, a.config(writeFile(t, "changes.ion", encode(t, false, late...))))
	wantError(t, err, outcome.Refused, change.ErrWentBackwards, "all 3 keys of the batch are older than the target's")
	e.same(pgSQL, chSQL)

	e.exec(`UPDATE orders SET amount_cents = amount_cents + 1 WHERE id IN (1, 3)`, `DELETE FROM orders WHERE id = 5`,
		`INSERT INTO orders VALUES (8, 18, 800, 'new')`, `UPDATE orders SET id = 9 WHERE id = 6`)
	e.catchUp(ctx, cfg, senv)
	e.same(pgSQL, chSQL)
}
