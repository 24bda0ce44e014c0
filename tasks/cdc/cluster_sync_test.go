package cdc

import (
	"context"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// TestSyncRefusesAClusterFirst (finding 3): a mapping that puts a table
// on a cluster is refused by cdc sync and by cdc setup with a source
// before either touches a server: with PostgreSQL down, sync used to fail
// transient ("connect to the source": retried for ever), and setup with a
// source made the publication and the slot before it refused, dropping
// only the slot. Both now refuse first (exit 2), creating nothing: no
// publication, no slot, no table on the cluster.
func TestSyncRefusesAClusterFirst(t *testing.T) {
	cl := testenv.Cluster(t)
	db := cl.CreateDatabase("cdc_cl_sync_")
	e := newSyncEnv(t)
	e.tables = []string{"public.acc"}
	e.exec(`CREATE TABLE acc (id bigint PRIMARY KEY, v bigint NOT NULL)`, `INSERT INTO acc VALUES (1, 1)`)
	for _, m := range []struct{ yaml, names string }{
		{"defaults: {target: {database: " + db + ", cluster: " + cl.Name + "}}\ntables:\n" + e.tablesYAML(), "public.acc"},
		{"defaults: {target: {database: " + db + "}}\ntables:\n" + e.tablesYAML() + "    target: {cluster: " + cl.Name + "}\n", "public.acc"},
	} {
		set, err := mapping.ParseSet("sync.yaml", []byte(m.yaml))
		if err != nil {
			t.Fatal(err)
		}
		cfg, env := e.config()
		cfg.Mappings = set
		cfg.ClickHouse.URL = cl.Replicas[0]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		down := cfg
		down.Postgres.DSN = "postgres://changesink@" + testenv.ClosedAddr(t) + "/changesink?sslmode=disable"
		_, err = Sync(ctx, down, env)
		wantRefused(t, err, outcome.Config, 2, change.ErrConfig)
		wantError(t, err, outcome.Config, change.ErrConfig, m.names, cl.Name, "cdc sync does not write targets on a cluster")

		_, err = SetupSync(ctx, cfg, env)
		wantRefused(t, err, outcome.Config, 2, change.ErrConfig)
		wantError(t, err, outcome.Config, change.ErrConfig, m.names, cl.Name, "nothing was created")
		for _, q := range []string{
			`SELECT count(*)::text FROM pg_publication WHERE pubname = '` + e.pub + `'`,
			`SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = '` + e.slot + `'`,
		} {
			if got := e.rows(q); len(got) != 1 || got[0] != "0" {
				t.Errorf("the refused setup left %v: %s", got, q)
			}
		}
		if got := testenv.QueryClickHouse(t, testenv.OpenClickHouse(t, cl.Replicas[0]), "SELECT count() FROM system.tables WHERE database = ?", db); got[0] != "0" {
			t.Errorf("the refused setup made %s tables on the cluster", got[0])
		}
	}
}
