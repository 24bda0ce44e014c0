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
	if got := s.Policy("sales", "orders"); got != AddColumns {
		t.Errorf("Policy(sales.orders) = %s", got)
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
			`s.yaml:3:21: schema_changes is "sometimes": use add_columns or refuse`},
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
	_, err = s.For("shop", "public", "events", []Column{{Name: "payload", Type: "String"}}, nil)
	if err == nil || !strings.Contains(err.Error(), "key is required") {
		t.Errorf("a table without a key: %v", err)
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

func TestCheckDistinct(t *testing.T) {
	s, err := ParseSet("s.yaml", []byte("tables:\n  - source: {database: d, schema: a, table: t}\n  - source: {database: d, schema: b, table: t}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var ms []*Mapping
	for _, schema := range []string{"a", "b"} {
		m, err := s.For("d", schema, "t", []Column{{Name: "id", Type: "Int64"}}, []string{"id"})
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	err = CheckDistinct(ms)
	if err == nil || !strings.Contains(err.Error(), "the targets of a.t and b.t share the name default.t") || !errors.Is(err, ErrMapping) {
		t.Errorf("CheckDistinct: %v", err)
	}
	if err := CheckDistinct(ms[:1]); err != nil {
		t.Errorf("one table: %v", err)
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
