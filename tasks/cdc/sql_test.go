package cdc

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/changesink/changesink/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden files and the generated batches")

// allStatements renders every statement changesink sends for a mapping.
func allStatements(m *Mapping, caps serverCaps) string {
	lock := qualified(m.Target.Database, lockName(m))
	aside := qualified(m.Target.Database, lockName(m)+"_x0123456789abcdef")
	stmts := []string{createDatabaseSQL(m), createTableSQL(m, caps), createViewSQL(m), createLedgerSQL(m), readSQL(m), versionsSQL(m), insertSQL(m),
		truncatedSQL(m), lockCreateSQL(lock, "0123456789abcdef", "host-'a'", 42), lockBeatSQL(lock, "0123456789abcdef", "host-'a'", 42), lockHolderSQL(lock), lockMineSQL(lock),
		lockMadeSQL, renameSQL(lock, aside), columnsSQL, tableSQL}
	return strings.Join(stmts, ";\n\n") + ";\n"
}

func TestSQLGolden(t *testing.T) {
	tests := []struct {
		golden, mapping string
		caps            serverCaps
	}{
		{"sql_orders_18.16.golden", ordersMapping, capsFor(18, 16)},
		{"sql_orders_current.golden", ordersMapping, latestCaps()},
		{"sql_types_18.16.golden", "testdata/types.mapping.yaml", capsFor(18, 16)},
		{"sql_types_current.golden", "testdata/types_current.mapping.yaml", latestCaps()},
		{"sql_quoting.golden", "testdata/quoting.mapping.yaml", latestCaps()},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			got := allStatements(loadMapping(t, tt.mapping), tt.caps)
			path := filepath.Join("testdata", tt.golden)
			if *update {
				testenv.WriteFile(t, path, []byte(got), 0o644)
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestSQLGolden -update)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs (go test -run TestSQLGolden -update rewrites it):\n%s", path, got)
			}
		})
	}
}

func TestQuoteIdent(t *testing.T) {
	tests := map[string]string{
		"orders_cdc": "orders_cdc", "_cdc_lsn": "_cdc_lsn", "Status2": "Status2",
		"order": "`order`", "Final": "`Final`", "select": "`select`",
		"2fa": "`2fa`", "my-table": "`my-table`", "naïve": "`naïve`", "a b": "`a b`", "x`y": "`x\\`y`", `x\y`: "`x\\\\y`",
	}
	for in, want := range tests {
		if got := quoteIdent(in); got != want {
			t.Errorf("quoteIdent(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestOrdersDDLIsTheSeeds compares setup's statements for the shipped
// orders mapping with the seed's create_target task, statement by statement.
func TestOrdersDDLIsTheSeeds(t *testing.T) {
	raw := testenv.ReadFile(t, filepath.Join(testenv.Seeds(t), "postgres-clickhouse-cdc.yaml"))
	var flow struct {
		Tasks []struct {
			ID  string `yaml:"id"`
			SQL string `yaml:"sql"`
		} `yaml:"tasks"`
	}
	if err := yaml.Unmarshal(raw, &flow); err != nil {
		t.Fatal(err)
	}
	var seed []string
	for _, task := range flow.Tasks {
		if task.ID == "create_target" {
			for _, s := range strings.Split(task.SQL, ";") {
				if s = strings.TrimSpace(s); s != "" {
					seed = append(seed, s)
				}
			}
		}
	}
	m := loadMapping(t, ordersMapping)
	for _, caps := range []serverCaps{capsFor(18, 16), latestCaps()} {
		ours := []string{createTableSQL(m, caps), createViewSQL(m)}
		if len(seed) != len(ours) {
			t.Fatalf("seed has %d statements: %q", len(seed), seed)
		}
		for i := range ours {
			if ours[i] != seed[i] {
				t.Errorf("statement %d\n ours %s\nseed's %s", i+1, ours[i], seed[i])
			}
		}
	}
}
