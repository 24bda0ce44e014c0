package cdc

import (
	"strings"
	"testing"
)

// TestBreakerMappingAliases: YAML anchors and aliases are plain YAML (a
// name or type written once and reused). Aliases resolved everywhere but
// in the key and columns lists, which refused them with a wrong message
// ("expected a string", "a column must be a mapping").
func TestBreakerMappingAliases(t *testing.T) {
	m, err := ParseMapping("m.yaml", []byte(`source: {database: &db shop, schema: public, table: t}
target: {table: x, database: *db}
columns:
  - {name: &id id, type: &money "Decimal(12, 2)"}
  - {name: price, type: *money}
  - {name: &code code, type: String, max_length: 8}
key: [*id, *code]
`))
	if err != nil {
		t.Fatalf("ParseMapping: %v", err)
	}
	if m.Target.Database != "shop" || len(m.cols) != 3 || m.cols[1].typ.kind != kindDecimal || m.keyNames() != "(id, code)" {
		t.Errorf("mapping %+v %+v %v", m.Target, m.Columns, m.Key)
	}
	_, err = ParseMapping("m.yaml", []byte(`source: {database: d, schema: s, table: t}
target: {table: x}
key: [id]
columns:
  - &idcol {name: id, type: Int64}
  - *idcol
`))
	if err == nil || !strings.Contains(err.Error(), `column "id" is listed twice`) {
		t.Errorf("a column repeated through an alias: %v, want listed twice", err)
	}
}

// TestBreakerMappingLocalTimeZone: Go's time.LoadLocation("Local") is the
// process's own zone, not an IANA name; the mapping accepted
// DateTime('Local') and setup failed on the server's "Cannot load time zone
// Local" as an internal error. It is a mapping mistake, located.
func TestBreakerMappingLocalTimeZone(t *testing.T) {
	for _, typ := range []string{"DateTime('Local')", "DateTime64(3, 'Local')", "Nullable(DateTime('Local'))"} {
		_, err := ParseMapping("m.yaml", []byte("source: {database: d, schema: s, table: t}\ntarget: {table: x}\nkey: [id]\n"+
			"columns:\n  - {name: id, type: Int64}\n  - {name: at, type: \""+typ+"\"}\n"))
		if err == nil || !strings.Contains(err.Error(), "m.yaml:6:") || !strings.Contains(err.Error(), "Local") {
			t.Errorf("%s: %v, want a mapping error on line 6", typ, err)
		}
	}
}
