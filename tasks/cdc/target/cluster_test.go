package target

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden files")

// TestClusterDDLGolden: the statements setup runs for a target on a
// cluster, for the shipped orders mapping and the mapping of names that
// need quoting (a database and a table whose ZooKeeper path segments are
// escaped).
func TestClusterDDLGolden(t *testing.T) {
	tests := []struct{ golden, mapping string }{
		{"cluster_orders.golden", "../../../flows/orders.mapping.yaml"},
		{"cluster_quoting.golden", "../testdata/quoting.mapping.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			m, err := mapping.Load(tt.mapping)
			if err != nil {
				t.Fatal(err)
			}
			m.Target.Cluster = "prod-eu.1"
			caps := mapping.CapsFor(18, 16)
			var stmts []string
			for _, s := range []string{createDatabaseSQL(m), createTableSQL(m, caps), createViewSQL(m), createLedgerSQL(m), createClusterLockSQL(m),
				"DROP TABLE IF EXISTS " + mapping.Qualified(m.Target.Database, m.Target.LiveView)} {
				got := clusterDDL(m, m.Target.Cluster, s)
				if !strings.Contains(got, " ON CLUSTER `prod-eu.1`") {
					t.Errorf("no ON CLUSTER in %s", got)
				}
				if strings.Contains(got, "ENGINE = ") && !strings.Contains(got, "ENGINE = Replicated") {
					t.Errorf("not a Replicated engine: %s", got)
				}
				stmts = append(stmts, got)
			}
			got := strings.Join(stmts, ";\n\n") + ";\n"
			path := filepath.Join("testdata", tt.golden)
			if *update {
				testenv.WriteFile(t, path, []byte(got), 0o644)
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestClusterDDLGolden -update)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs (go test -run TestClusterDDLGolden -update rewrites it):\n%s", path, got)
			}
		})
	}
}

// TestClusterDDLLeavesOthers: statements that are not about the target's
// objects pass unchanged, and nothing changes without a cluster.
func TestClusterDDLLeavesOthers(t *testing.T) {
	m, err := mapping.Load("../../../flows/orders.mapping.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"CREATE TABLE IF NOT EXISTS default.orders_cdc_other (a UInt8) ENGINE = MergeTree ORDER BY a",
		"ALTER TABLE default.orders_cdc ADD COLUMN x UInt8",
		"SELECT 1",
	} {
		if got := clusterDDL(m, "c", s); got != s {
			t.Errorf("clusterDDL(%q) = %q, want it unchanged", s, got)
		}
	}
	if got, s := (&Server{M: m}).ddl(createViewSQL(m)), createViewSQL(m); got != s {
		t.Errorf("ddl without a cluster = %q", got)
	}
}

func TestZooKeeperPath(t *testing.T) {
	tests := map[[2]string]string{
		{"default", "orders_cdc"}: "/clickhouse/tables/{shard}/default/orders_cdc",
		{"my-db", "a/b"}:          "/clickhouse/tables/{shard}/my-db/a%2Fb",
		{"x{shard}", "it's"}:      "/clickhouse/tables/{shard}/x%7Bshard%7D/it%27s",
	}
	for in, want := range tests {
		if got := zooKeeperPath(in[0], in[1]); got != want {
			t.Errorf("zooKeeperPath(%q, %q) = %s, want %s", in[0], in[1], got, want)
		}
	}
}

// TestReplicatedPath: the ZooKeeper path is read from engine_full as
// setup writes it (quoteString), escapes and all, and "" from an engine
// that names none.
func TestReplicatedPath(t *testing.T) {
	tests := []struct{ engineFull, want string }{
		{"ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/db/orders_cdc', '{replica}', _cdc_lsn) ORDER BY id SETTINGS index_granularity = 8192",
			"/clickhouse/tables/{shard}/db/orders_cdc"},
		{"ReplicatedMergeTree(" + quoteString(zooKeeperPath("d'b", `t\x`)) + ", '{replica}') ORDER BY seq", zooKeeperPath("d'b", `t\x`)},
		{"ReplacingMergeTree(_cdc_lsn) ORDER BY id SETTINGS index_granularity = 8192", ""},
		{"ReplicatedMergeTree('/cut", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := replicatedPath(tt.engineFull); got != tt.want {
			t.Errorf("replicatedPath(%q) = %q, want %q", tt.engineFull, got, tt.want)
		}
	}
}
