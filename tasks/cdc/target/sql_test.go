package target

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/mapping"

	"gopkg.in/yaml.v3"

	"github.com/changesink/changesink/internal/testenv"
)

// currentCaps are what a current ClickHouse supports: every type.
var currentCaps = mapping.CapsFor(26, 9)

// allStatements renders every statement changesink sends for a mapping.
func allStatements(m *mapping.Mapping, caps mapping.ServerCaps) string {
	lock := mapping.Qualified(m.Target.Database, mapping.LockName(m))
	aside := mapping.Qualified(m.Target.Database, mapping.LockName(m)+"_x0123456789abcdef")
	stmts := []string{createDatabaseSQL(m), createTableSQL(m, caps), createViewSQL(m), createLedgerSQL(m), readSQL(m), versionsSQL(m),
		deletedSQL(m, false), deletedSQL(m, true), insertSQL(m),
		truncatedSQL(m), lockCreateSQL(lock, "0123456789abcdef", "host-'a'", 42), lockBeatSQL(lock, "0123456789abcdef", "host-'a'", 42), lockHolderSQL(lock), lockMineSQL(lock),
		lockMadeSQL, renameSQL(lock, aside), columnsSQL, tableSQL}
	return strings.Join(stmts, ";\n\n") + ";\n"
}

func TestSQLGolden(t *testing.T) {
	tests := []struct {
		golden, mapping string
		caps            mapping.ServerCaps
	}{
		{"sql_orders_18.16.golden", ordersMappingFile, mapping.CapsFor(18, 16)},
		{"sql_orders_current.golden", ordersMappingFile, currentCaps},
		{"sql_types_18.16.golden", "../testdata/types.mapping.yaml", mapping.CapsFor(18, 16)},
		{"sql_types_current.golden", "../testdata/types_current.mapping.yaml", currentCaps},
		{"sql_quoting.golden", "../testdata/quoting.mapping.yaml", currentCaps},
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
		if got := mapping.QuoteIdent(in); got != want {
			t.Errorf("quoteIdent(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestOrdersDDLIsTheSeeds compares setup's statements for the shipped
// orders mapping with the seed's create_target task, statement by statement:
// the seed's text exactly on a server without the is_deleted engine
// argument (18.16), and with it, ReplacingMergeTree(_cdc_lsn, _cdc_deleted),
// on a current one.
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
	m := loadMapping(t, ordersMappingFile)
	for _, caps := range []mapping.ServerCaps{mapping.CapsFor(18, 16), currentCaps} {
		ours := []string{createTableSQL(m, caps), createViewSQL(m)}
		if len(seed) != len(ours) {
			t.Fatalf("seed has %d statements: %q", len(seed), seed)
		}
		for i := range ours {
			want := seed[i]
			if caps.IsDeleted {
				want = strings.Replace(want, "ReplacingMergeTree(_cdc_lsn)", "ReplacingMergeTree(_cdc_lsn, _cdc_deleted)", 1)
			}
			if ours[i] != want {
				t.Errorf("statement %d\n ours %s\nseed's %s", i+1, ours[i], want)
			}
		}
	}
}

// ordersMappingFile is the mapping shipped in flows/ for the seed's orders
// table.
const ordersMappingFile = "../../../flows/orders.mapping.yaml"

// loadMapping reads the mapping file at path.
func loadMapping(t testing.TB, path string) *mapping.Mapping {
	t.Helper()
	m, err := mapping.Load(path)
	if err != nil {
		t.Fatalf("LoadMapping(%s): %v", path, err)
	}
	return m
}
