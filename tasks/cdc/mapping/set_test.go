package mapping

import (
	"errors"
	"strings"
	"testing"
)

const setFile = `defaults:
  source: {database: shop, schema: public}
  target: {database: analytics, table: "{schema}_{table}"}
  schema_changes: refuse
tables:
  - source: {table: orders}
    target: {table: orders_cdc}
    key: [id]
    columns:
      - {name: id, type: Int64}
      - {name: status, type: String, max_length: 32}
  - source: {schema: sales, table: orders}
    schema_changes: add_columns
    columns:
      - {name: amount, type: "Decimal(12, 2)", source_type: "numeric(12,2)"}
`

func TestSetForListedAndGenerated(t *testing.T) {
	s, err := ParseSet("s.yaml", []byte(setFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Tables(), ","); got != "public.orders,sales.orders" {
		t.Errorf("Tables() = %s", got)
	}
	// Listed, complete: the entry as written, the defaults filled in.
	m, err := s.For("shop", "public", "orders", []Column{{Name: "id", Type: "Int64"}, {Name: "status", Type: "String"}}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Source != (Source{Database: "shop", Schema: "public", Table: "orders", DeletedField: "deleted", MetadataField: "metadata"}) ||
		m.Target.Database != "analytics" || m.Target.Table != "orders_cdc" || m.Cols[1].MaxLen != 32 || m.KeyNames() != "id" {
		t.Errorf("public.orders: %+v %+v %+v", m.Source, m.Target, m.Cols)
	}
	// Listed with overrides only: the catalog's columns, the entry's
	// types where it gives one; the target named by the pattern.
	m, err = s.For("shop", "sales", "orders", []Column{{Name: "id", Type: "Int32", SourceType: "integer"},
		{Name: "amount", Type: "String", SourceType: "numeric"}, {Name: "note", Type: "Nullable(String)", SourceType: "text"}}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range m.Columns {
		cols = append(cols, c.Name+" "+c.Type)
	}
	if m.Target.Table != "sales_orders" || m.Target.Database != "analytics" || m.KeyNames() != "id" ||
		strings.Join(cols, ", ") != "id Int32, amount Decimal(12, 2), note Nullable(String)" {
		t.Errorf("sales.orders: %+v %s key %s", m.Target, strings.Join(cols, ", "), m.KeyNames())
	}
	// Not listed: all from the catalog and the defaults.
	m, err = s.For("shop", "public", "customers", []Column{{Name: "id", Type: "Int64"}}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Target.Table != "public_customers" || m.Source.Database != "shop" || m.Target.LiveView != "public_customers_live" {
		t.Errorf("public.customers: %+v %+v", m.Source, m.Target)
	}
	for table, want := range map[string]string{"orders": Refuse, "customers": Refuse} {
		if got := s.Policy("public", table); got != want {
			t.Errorf("Policy(public.%s) = %s, want %s", table, got, want)
		}
	}
	if got := s.Policy("sales", "orders"); got != Follow {
		t.Errorf("Policy(sales.orders) = %s, want %s (add_columns, its earlier name, reads as it)", got, Follow)
	}
}

// TestSetDefaultsAlone: a mapping of defaults only maps every table from
// the catalog under them (cdc sync of a whole publication).
func TestSetDefaultsAlone(t *testing.T) {
	s, err := ParseSet("s.yaml", []byte("defaults: {target: {database: analytics}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Tables()) != 0 {
		t.Errorf("Tables() = %v, want none", s.Tables())
	}
	m, err := s.For("shop", "public", "items", []Column{{Name: "id", Type: "Int64"}}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Target.Database != "analytics" || m.Source.Table != "items" {
		t.Errorf("public.items: %+v %+v", m.Source, m.Target)
	}
}

func TestSetErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"listed twice", "tables:\n  - source: {database: d, schema: s, table: t}\n  - source: {database: d, schema: s, table: t}\n",
			"s.yaml:3:45: table s.t is listed twice"},
		{"no tables", "defaults: {source: {database: d}}\ntables: []\n", "s.yaml:2:9: tables must list at least one table (or leave tables out: defaults alone apply to every table)"},
		{"bad policy", "tables:\n  - source: {database: d, schema: s, table: t}\n    schema_changes: sometimes\n",
			`s.yaml:3:21: schema_changes is "sometimes": use follow or refuse`},
		{"key in defaults", "defaults: {key: [id]}\ntables:\n  - source: {database: d, schema: s, table: t}\n",
			"s.yaml:1:11: defaults cannot hold key or columns: they belong to one table"},
		{"unknown key in a table", "tables:\n  - source: {database: d, schema: s, table: t}\n    colums: []\n",
			`s.yaml:3:5: unknown key "colums" in a table (known keys: source, target, key, columns, schema_changes)`},
		{"a complete entry's mistake", "tables:\n  - source: {database: d, schema: s, table: t}\n    target: {table: x}\n    key: [k]\n    columns: [{name: k, type: Int128}]\n",
			`s.yaml:5:31: column "k": unsupported type "Int128" (supported: Int8..Int64, UInt8..UInt64, Float32, Float64, Decimal(P, S), String, Bool, Date, DateTime, DateTime('tz'), DateTime64(p, 'tz'), UUID, Nullable(T))`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSet("s.yaml", []byte(tt.yaml))
			if err == nil || err.Error() != tt.want || !errors.Is(err, ErrMapping) {
				t.Errorf("error\n got %v\nwant %s", err, tt.want)
			}
		})
	}
}

func TestSetForRefusals(t *testing.T) {
	s, err := ParseSet("s.yaml", []byte(setFile))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.For("shop", "sales", "orders", []Column{{Name: "id", Type: "Int64"}}, []string{"id"})
	if err == nil || err.Error() != `s.yaml:15:16: column "amount" is not a column of sales.orders` {
		t.Errorf("an override of a column the source lacks: %v", err)
	}
}

// TestSetForNoKey: a table whose catalog gives no key (no primary key:
// REPLICA IDENTITY FULL names no key) is refused saying so and what to do,
// at its entry when the file lists it; an entry's key: maps it.
func TestSetForNoKey(t *testing.T) {
	const file = `defaults:
  source: {database: shop, schema: public}
tables:
  - source: {table: orders}
  - source: {table: events}
    key: [id]
`
	tests := []struct{ name, file, table, want string }{
		{"no file", "", "events", "mapping: table public.events has no primary key to order its target by (REPLICA IDENTITY FULL names no key), so key is required: " +
			"add a primary key, or give the table an entry under tables with key: the columns that identify a row"},
		{"not listed", file, "logs", "s.yaml: table public.logs has no primary key to order its target by (REPLICA IDENTITY FULL names no key), so key is required: " +
			"add a primary key, or give the table an entry under tables with key: the columns that identify a row"},
		{"listed without a key", file, "orders", "s.yaml:4:5: table public.orders has no primary key to order its target by (REPLICA IDENTITY FULL names no key), so key is required: " +
			"add a primary key, or give its entry key: the columns that identify a row"},
		{"listed with a key", file, "events", ""},
	}
	cols := []Column{{Name: "id", Type: "Int64"}, {Name: "payload", Type: "Nullable(String)"}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Set{}
			if tt.file != "" {
				var err error
				if s, err = ParseSet("s.yaml", []byte(tt.file)); err != nil {
					t.Fatal(err)
				}
			}
			m, err := s.For("shop", "public", tt.table, cols, nil)
			if tt.want == "" {
				if err != nil || m.KeyNames() != "id" {
					t.Errorf("For: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want || !errors.Is(err, ErrNoKey) || !errors.Is(err, ErrMapping) {
				t.Errorf("For:\n got %v\nwant %s", err, tt.want)
			}
		})
	}
}

func TestSetSingleForm(t *testing.T) {
	const one = "source: {database: d, schema: s, table: t}\ntarget: {table: x}\nkey: [k]\ncolumns: [{name: k, type: UInt64}]\n"
	s, err := ParseSet("m.yaml", []byte(one))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Single()
	if err != nil {
		t.Fatal(err)
	}
	want, err := Parse("m.yaml", []byte(one))
	if err != nil {
		t.Fatal(err)
	}
	if got.Target != want.Target || got.Source != want.Source || got.KeyNames() != want.KeyNames() || got.File != "m.yaml" {
		t.Errorf("Single() = %+v, Parse = %+v", got, want)
	}
	if _, err := (&Set{entries: make([]setEntry, 2)}).Single(); err == nil {
		t.Error("Single of two tables")
	}
}

// TestCheckDistinct: two tables whose targets would share a name are
// refused, and Set.CheckDistinct's message says what named each target:
// the defaults' pattern (and the key that sets it, defaults.target.table,
// written or not) or an entry's target.table, with its line.
func TestCheckDistinct(t *testing.T) {
	tests := []struct {
		name, file string // file "": no mapping file (cdc sync of a whole publication)
		tables     [][2]string
		want       string
	}{
		{"no file, the default pattern", "", [][2]string{{"a", "items"}, {"b", "items"}},
			`mapping: the targets of a.items and b.items share the name default.items, both named by the defaults' target.table pattern "{table}" ` +
				`(defaults.target.table, not set: the default): ` +
				`set defaults.target.table to a pattern that tells them apart, as "{schema}_{table}", or give one of them an entry under tables with its own target.table`},
		{"listed without a target, the default pattern", "tables:\n  - source: {database: d, schema: a, table: t}\n  - source: {database: d, schema: b, table: t}\n",
			[][2]string{{"a", "t"}, {"b", "t"}},
			`s.yaml: the targets of a.t and b.t share the name default.t, both named by the defaults' target.table pattern "{table}" ` +
				`(defaults.target.table, not set: the default): ` +
				`set defaults.target.table to a pattern that tells them apart, as "{schema}_{table}", or give one of them an entry under tables with its own target.table`},
		{"a pattern the file sets", "defaults:\n  target: {database: an, table: \"x_{table}\"}\n", [][2]string{{"a", "t"}, {"b", "t"}},
			`s.yaml:2:33: the targets of a.t and b.t share the name an.x_t, both named by the defaults' target.table pattern "x_{table}" ` +
				`(defaults.target.table, line 2): ` +
				`set defaults.target.table to a pattern that tells them apart, as "{schema}_{table}", or give one of them an entry under tables with its own target.table`},
		{"an entry and the pattern", "tables:\n  - source: {database: d, schema: a, table: x}\n    target: {table: items}\n", [][2]string{{"a", "x"}, {"b", "items"}},
			`s.yaml:3:21: the targets of a.x (named by target.table of its entry, line 3) ` +
				`and b.items (named by the defaults' target.table pattern "{table}" (defaults.target.table, not set: the default)) share the name default.items: ` +
				`set defaults.target.table to a pattern that tells them apart, as "{schema}_{table}", or give one of them an entry under tables with its own target.table`},
		{"two entries", "tables:\n  - source: {database: d, schema: a, table: x}\n    target: {table: items}\n  - source: {database: d, schema: b, table: y}\n    target: {table: items}\n",
			[][2]string{{"a", "x"}, {"b", "y"}},
			`s.yaml:5:21: the targets of a.x (named by target.table of its entry, line 3) and b.y (named by target.table of its entry, line 5) ` +
				`share the name default.items: give one of them another target.table`},
		{"a target named as another's live view", "", [][2]string{{"a", "t"}, {"b", "t_live"}},
			`mapping: the targets of a.t and b.t_live share the name default.t_live, both named by the defaults' target.table pattern "{table}" ` +
				`(defaults.target.table, not set: the default): ` +
				`set defaults.target.table to a pattern that tells them apart, as "{schema}_{table}", or give one of them an entry under tables with its own target.table`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Set{}
			if tt.file != "" {
				var err error
				if s, err = ParseSet("s.yaml", []byte(tt.file)); err != nil {
					t.Fatal(err)
				}
			}
			var ms []*Mapping
			for _, st := range tt.tables {
				m, err := s.For("d", st[0], st[1], []Column{{Name: "id", Type: "Int64"}}, []string{"id"})
				if err != nil {
					t.Fatal(err)
				}
				ms = append(ms, m)
			}
			err := s.CheckDistinct(ms)
			if err == nil || err.Error() != tt.want || !errors.Is(err, ErrTargetsShareName) || !errors.Is(err, ErrMapping) {
				t.Errorf("CheckDistinct:\n got %v\nwant %s", err, tt.want)
			}
			if err := s.CheckDistinct(ms[:1]); err != nil {
				t.Errorf("one table: %v", err)
			}
			// Without the set, the message cannot say what named them.
			err = CheckDistinct(ms)
			if err == nil || !strings.Contains(err.Error(), " share the name ") || !strings.Contains(err.Error(), "set defaults.target.table") ||
				strings.Contains(err.Error(), "named by") || !errors.Is(err, ErrTargetsShareName) {
				t.Errorf("CheckDistinct without the set: %v", err)
			}
		})
	}
}

// TestDefaultTargetNameKept: the default pattern stays "{table}", so the
// targets existing pipelines write keep their names (public.orders →
// orders), and a pattern that tells schemas apart is the file's choice.
func TestDefaultTargetNameKept(t *testing.T) {
	tests := []struct{ file, schema, table, want string }{
		{"", "public", "orders", "orders"},
		{"", "sales", "orders", "orders"},
		{"defaults: {target: {database: an}}\n", "public", "orders", "orders"},
		{"defaults: {target: {table: \"{schema}_{table}\"}}\n", "public", "orders", "public_orders"},
		{"defaults: {target: {table: \"{schema}_{table}\"}}\n", "b", "items", "b_items"},
	}
	for _, tt := range tests {
		s := &Set{}
		if tt.file != "" {
			var err error
			if s, err = ParseSet("s.yaml", []byte(tt.file)); err != nil {
				t.Fatal(err)
			}
		}
		m, err := s.For("d", tt.schema, tt.table, []Column{{Name: "id", Type: "Int64"}}, []string{"id"})
		if err != nil {
			t.Fatal(err)
		}
		if m.Target.Table != tt.want || m.Target.LiveView != tt.want+"_live" {
			t.Errorf("%q: %s.%s → %s (%s), want %s", tt.file, tt.schema, tt.table, m.Target.Table, m.Target.LiveView, tt.want)
		}
	}
}

func TestSetClusterFromDefaults(t *testing.T) {
	const file = `defaults:
  source: {database: shop, schema: public}
  target: {database: analytics, cluster: c1}
tables:
  - source: {table: orders}
    target: {table: orders_cdc}
    key: [id]
    columns: [{name: id, type: Int64}]
  - source: {table: items}
    target: {table: items_cdc, cluster: c2}
    key: [id]
    columns: [{name: id, type: Int64}]
`
	s, err := ParseSet("s.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ table, want string }{{"orders", "c1"}, {"items", "c2"}, {"customers", "c1"}} {
		m, err := s.For("shop", "public", tt.table, []Column{{Name: "id", Type: "Int64"}}, []string{"id"})
		if err != nil {
			t.Fatal(err)
		}
		if m.Target.Cluster != tt.want {
			t.Errorf("%s: Target.Cluster = %q, want %q", tt.table, m.Target.Cluster, tt.want)
		}
	}
}
