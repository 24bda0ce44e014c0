package cdc

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/internal/iongen"
)

// ordersMapping is the mapping shipped in flows/ for the seed's orders table.
const ordersMapping = "../../flows/orders.mapping.yaml"

func loadMapping(t testing.TB, path string) *Mapping {
	t.Helper()
	m, err := LoadMapping(path)
	if err != nil {
		t.Fatalf("LoadMapping(%s): %v", path, err)
	}
	return m
}

// orderRow is an orders row image; nil fields are written as Ion nulls.
func orderRow(id int64, customer, amount any, status any) iongen.Struct {
	return iongen.Struct{{"id", id}, {"customer_id", customer}, {"amount_cents", amount}, {"status", status}}
}

// orderEvent is an INLINE event of shop.public.orders.
func orderEvent(id int64, customer, amount, status any, lsn any, deleted bool) iongen.Struct {
	op := "UPDATE"
	if deleted {
		op = "DELETE"
	}
	return iongen.Event(orderRow(id, customer, amount, status), deleted,
		iongen.Metadata(op, iongen.Source("shop", "public", "orders", lsn, 700, "false")))
}

// createEvent is a CREATE event of row in shop.public.orders.
func createEvent(row iongen.Struct, lsn int64) iongen.Struct {
	return iongen.Event(row, false, iongen.Metadata("CREATE", iongen.Source("shop", "public", "orders", lsn, 700, "false")))
}

// encode writes events in text (binary=false) or binary Ion.
func encode(t testing.TB, binary bool, events ...any) []byte {
	t.Helper()
	var b bytes.Buffer
	w := iongen.NewWriter(&b, binary)
	for _, e := range events {
		var err error
		if raw, ok := e.([]byte); ok {
			err = w.Raw(raw)
		} else {
			err = w.Write(e)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// writeFile writes data to a file in a fresh temp dir and returns its path.
func writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	testenv.WriteFile(t, p, data, 0o644)
	return p
}

// offlineConfig applies batch with the mapping m against a ClickHouse
// address nothing listens at (testenv.ClosedAddr), writing into a fresh
// directory: for runs that must end, refused or misconfigured, before the
// server is needed.
func offlineConfig(t testing.TB, m *Mapping, batch string) Config {
	t.Helper()
	return Config{Mapping: m, ClickHouse: ClickHouse{URL: "clickhouse://" + testenv.ClosedAddr(t) + "/default"},
		BatchFile: batch, OutDir: kestra.Dir{Path: t.TempDir()}}
}

// decodeBytes decodes a batch held in memory with the given worker count.
func decodeBytes(t testing.TB, m *Mapping, data []byte, workers int) (*batch, error) {
	t.Helper()
	return decodeFile(context.Background(), writeFile(t, "changes.ion", data), m, workers)
}

func forms() []struct {
	name   string
	binary bool
} {
	return []struct {
		name   string
		binary bool
	}{{"text", false}, {"binary", true}}
}

// setHook sets cfg's hook that runs at point: "locked" (the target's lock
// held), "before the insert", "after the insert" or "after the ledger row"
// (before the lock is given back).
func setHook(t *testing.T, cfg *Config, point string, f func(context.Context) error) {
	t.Helper()
	switch point {
	case "locked":
		cfg.hooks.locked = f
	case "before the insert":
		cfg.hooks.beforeInsert = f
	case "after the insert":
		cfg.hooks.afterInsert = f
	case "after the ledger row":
		cfg.hooks.recorded = f
	default:
		t.Fatalf("no hook at %q", point)
	}
}

// proxiedOrders sets e's target up and returns a proxy in front of its
// server, a batch of two new orders and the config that applies it
// through the proxy.
func (e *env) proxiedOrders() (p *testenv.Proxy, batch string, cfg Config) {
	e.t.Helper()
	e.setup()
	p, viaProxy := e.proxied()
	batch = writeFile(e.t, "changes.ion", encode(e.t, false,
		orderEvent(1, int64(10), int64(500), "new", int64(100), false),
		orderEvent(2, int64(20), int64(700), "new", int64(101), false)))
	cfg = e.config(batch)
	cfg.ClickHouse.URL = viaProxy
	return p, batch, cfg
}

// replays applies batch again and checks that the run is a replay: nothing
// pending, the verified keys as given.
func (e *env) replays(batch string, verified int64) {
	e.t.Helper()
	res, err := Apply(context.Background(), e.config(batch))
	if err != nil {
		e.t.Fatalf("re-run: %v", err)
	}
	if res.Pending != 0 || res.Verified != verified {
		e.t.Errorf("re-run outputs %v, want a replay (pending 0, %d verified)", res.Outputs(), verified)
	}
}
