package mapping

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

func TestShippedOrdersMapping(t *testing.T) {
	m, err := Load("../../../flows/orders.mapping.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Source, (Source{Database: "shop", Schema: "public", Table: "orders", DeletedField: "deleted", MetadataField: "metadata"}); got != want {
		t.Errorf("Source = %+v, want %+v", got, want)
	}
	if got, want := m.Target, (Target{Database: "default", Table: "orders_cdc", LiveView: "orders_live", VersionColumn: "_cdc_lsn", DeletedColumn: "_cdc_deleted"}); got != want {
		t.Errorf("Target = %+v, want %+v", got, want)
	}
	if strings.Join(m.Key, ",") != "id" {
		t.Errorf("Key = %v", m.Key)
	}
	var cols []string
	for _, c := range m.Columns {
		cols = append(cols, c.Name+" "+c.Type)
	}
	if got, want := strings.Join(cols, ", "), "id Int64, customer_id Int64, amount_cents Int64, status String"; got != want {
		t.Errorf("columns = %s, want %s", got, want)
	}
	if m.Cols[3].MaxLen != 32 {
		t.Errorf("status max_length = %d, want 32 (the seed's len(status) > 32 check)", m.Cols[3].MaxLen)
	}
}

func TestMappingDefaults(t *testing.T) {
	m, err := Parse("m.yaml", []byte("source: {database: d, schema: s, table: t}\ntarget: {table: x}\nkey: [k]\ncolumns: [{name: k, type: UInt64}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Target{Database: "default", Table: "x", LiveView: "x_live", VersionColumn: "_cdc_lsn", DeletedColumn: "_cdc_deleted"}
	if m.Target != want {
		t.Errorf("Target = %+v, want %+v", m.Target, want)
	}
	if m.Source.DeletedField != "deleted" || m.Source.MetadataField != "metadata" {
		t.Errorf("Source = %+v", m.Source)
	}
}

func TestMappingCluster(t *testing.T) {
	m, err := Parse("m.yaml", []byte("source: {database: d, schema: s, table: t}\ntarget: {table: x, cluster: prod-eu.1}\nkey: [k]\ncolumns: [{name: k, type: UInt64}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Target.Cluster, "prod-eu.1"; got != want {
		t.Errorf("Target.Cluster = %q, want %q", got, want)
	}
}

func TestMappingErrors(t *testing.T) {
	const head = "source: {database: d, schema: s, table: t}\ntarget: {table: x}\n"
	tests := []struct {
		name string
		yaml string
		want string // the whole message
	}{
		{"empty", "", "m.yaml: the mapping is empty"},
		{"not a mapping", "- a\n", "m.yaml:1:1: the mapping must be a mapping with the keys source, target, key, columns, schema_changes"},
		{"unknown top key", head + "key: [k]\ncolumns: [{name: k, type: Int64}]\nextra: 1\n",
			`m.yaml:5:1: unknown key "extra" in the mapping (known keys: source, target, key, columns, schema_changes)`},
		{"unknown source key", "source: {database: d, schema: s, table: t, tabel: u}\ntarget: {table: x}\nkey: [k]\ncolumns: [{name: k, type: Int64}]\n",
			`m.yaml:1:44: unknown key "tabel" in source (known keys: database, schema, table, deleted_field, metadata_field, partial_snapshots)`},
		{"unknown column key", head + "key: [k]\ncolumns:\n  - name: k\n    type: Int64\n    nullable: true\n",
			`m.yaml:7:5: unknown key "nullable" in a column (known keys: name, type, max_length, source_type)`},
		{"repeated key", head + "key: [k]\ncolumns: [{name: k, type: Int64, type: String}]\n",
			`m.yaml:4:34: key "type" repeated in a column`},
		{"yaml syntax", "source: {database: d\n", "m.yaml: yaml: line 1: did not find expected ',' or '}'"},
		{"missing source", "target: {table: x}\nkey: [k]\ncolumns: [{name: k, type: Int64}]\n", "m.yaml:1:1: source is required (database, schema, table)"},
		{"missing source table", "source: {database: d, schema: s}\ntarget: {table: x}\nkey: [k]\ncolumns: [{name: k, type: Int64}]\n",
			"m.yaml:1:9: source.table is required"},
		{"missing target table", "source: {database: d, schema: s, table: t}\ntarget: {database: x}\nkey: [k]\ncolumns: [{name: k, type: Int64}]\n",
			"m.yaml:2:9: target.table is required"},
		{"missing key", head + "columns: [{name: k, type: Int64}]\n", "m.yaml:1:1: key is required: the list of key columns, as in [id]"},
		{"key not a list", head + "key: k\ncolumns: [{name: k, type: Int64}]\n", "m.yaml:3:6: expected a list, as in [id]"},
		{"key not in columns", head + "key: [id]\ncolumns: [{name: k, type: Int64}]\n", `m.yaml:3:7: key column "id" is not in columns`},
		{"nullable key", head + "key: [k]\ncolumns: [{name: k, type: Nullable(Int64)}]\n", `m.yaml:3:7: key column "k" must not be Nullable (ClickHouse cannot ORDER BY it)`},
		{"float key", head + "key: [k]\ncolumns: [{name: k, type: Float64}]\n", `m.yaml:3:7: key column "k" must not be a Float (equality on floats is not a key)`},
		{"columns not a list", head + "key: [k]\ncolumns: {name: k, type: Int64}\n", "m.yaml:4:10: columns must be a list of {name, type, max_length, source_type}"},
		{"no columns", head + "key: [k]\ncolumns: []\n", "m.yaml:4:10: columns is required: a list of {name, type} with at least the key columns"},
		{"bad type", head + "key: [k]\ncolumns: [{name: k, type: Int128}]\n",
			`m.yaml:4:27: column "k": unsupported type "Int128" (supported: Int8..Int64, UInt8..UInt64, Float32, Float64, Decimal(P, S), String, Bool, Date, DateTime, DateTime('tz'), DateTime64(p, 'tz'), UUID, Nullable(T))`},
		{"bad decimal", head + "key: [k]\ncolumns: [{name: k, type: Int64}, {name: p, type: 'Decimal(5, 7)'}]\n",
			`m.yaml:4:51: column "p": Decimal(5, 7): precision must be 1..76 and scale 0..precision`},
		{"bad zone", head + "key: [k]\ncolumns: [{name: k, type: Int64}, {name: p, type: \"DateTime64(3, 'Mars/Olympus')\"}]\n",
			`m.yaml:4:51: column "p": unknown time zone 'Mars/Olympus': unknown time zone Mars/Olympus`},
		{"max_length on Int", head + "key: [k]\ncolumns: [{name: k, type: Int64, max_length: 3}]\n",
			`m.yaml:4:46: column "k": max_length applies to String columns only`},
		{"max_length zero", head + "key: [k]\ncolumns: [{name: k, type: String, max_length: 0}]\n",
			`m.yaml:4:47: column "k": max_length must be at least 1`},
		{"max_length text", head + "key: [k]\ncolumns: [{name: k, type: String, max_length: many}]\n",
			`m.yaml:4:47: expected an integer`},
		{"duplicate column", head + "key: [k]\ncolumns: [{name: k, type: Int64}, {name: k, type: String}]\n",
			`m.yaml:4:42: column "k" is listed twice`},
		{"column is version column", head + "key: [k]\ncolumns: [{name: k, type: Int64}, {name: _cdc_lsn, type: UInt64}]\n",
			`m.yaml:4:42: table s.t: column "_cdc_lsn" is named like the target's version column (_cdc_lsn) or delete-marker column (_cdc_deleted)`},
		{"column is deleted field", head + "key: [k]\ncolumns: [{name: k, type: Int64}, {name: deleted, type: Bool}]\n",
			`m.yaml:4:42: column "deleted" collides with the trigger's "deleted" field; set source.deleted_field/metadata_field to the names the trigger uses`},
		{"bad identifier", head + "key: [k]\ncolumns: [{name: \"a,b\", type: Int64}]\n",
			"m.yaml:4:18: column name \"a,b\" contains one of ` \" \\ , ( ) (not supported)"},
		{"create_database not bool", "source: {database: d, schema: s, table: t}\ntarget: {table: x, create_database: yes please}\nkey: [k]\ncolumns: [{name: k, type: Int64}]\n",
			"m.yaml:2:37: expected true or false"},
		// The live view took the ledger's or the lock's name: setup failed
		// saying the ledger had no column seq, or succeeded and every apply
		// then failed as internal (exit 4: "read the lock …: Unknown
		// identifier: pid").
		{"live view is the ledger", "source: {database: d, schema: s, table: t}\ntarget: {table: x, live_view: x_ledger}\nkey: [k]\ncolumns: [{name: k, type: Int64}]\n",
			`m.yaml:2:31: target.live_view "x_ledger" is the name of the ledger table changesink keeps next to x; choose another name`},
		{"live view is the lock", "source: {database: d, schema: s, table: t}\ntarget: {table: x, live_view: x_lock}\nkey: [k]\ncolumns: [{name: k, type: Int64}]\n",
			`m.yaml:2:31: target.live_view "x_lock" is the name of the lock table changesink keeps next to x; choose another name`},
		{"cluster not a name", "source: {database: d, schema: s, table: t}\ntarget: {table: x, cluster: \"a b\"}\nkey: [k]\ncolumns: [{name: k, type: Int64}]\n",
			`m.yaml:2:29: target.cluster "a b" is not a cluster name (letters, digits, _ . -; as remote_servers names it)`},
		{"cluster empty", "source: {database: d, schema: s, table: t}\ntarget: {table: x, cluster: \"\"}\nkey: [k]\ncolumns: [{name: k, type: Int64}]\n",
			`m.yaml:2:29: target.cluster "" is not a cluster name (letters, digits, _ . -; as remote_servers names it)`},
		{"two documents", head + "key: [k]\ncolumns: [{name: k, type: Int64}]\n---\na: 1\n", "m.yaml:5:1: a second YAML document; a mapping file holds one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("m.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("ParseMapping accepted:\n%s", tt.yaml)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("error\n got %s\nwant %s", got, tt.want)
			}
			if !errors.Is(err, ErrMapping) {
				t.Errorf("error does not match ErrMapping: %v", err)
			}
		})
	}
}

func TestLoadMappingMissingFile(t *testing.T) {
	_, err := Load("testdata/no-such.yaml")
	testenv.WantError(t, err, outcome.Config, ErrMapping, "testdata/no-such.yaml: cannot read the mapping file")
}

func TestParseType(t *testing.T) {
	tests := []struct {
		in, old, current string
	}{
		{"Int8", "Int8", "Int8"},
		{"UInt64", "UInt64", "UInt64"},
		{"Float32", "Float32", "Float32"},
		{"Decimal(18,2)", "Decimal(18, 2)", "Decimal(18, 2)"},
		{"Bool", "UInt8", "Bool"},
		{"Nullable(Bool)", "Nullable(UInt8)", "Nullable(Bool)"},
		{"Date", "Date", "Date"},
		{"DateTime", "DateTime", "DateTime"},
		{"DateTime('UTC')", "DateTime('UTC')", "DateTime('UTC')"},
		{"DateTime64(6, 'Europe/Paris')", "DateTime64(6, 'Europe/Paris')", "DateTime64(6, 'Europe/Paris')"},
		{"Nullable(DateTime64(3))", "Nullable(DateTime64(3))", "Nullable(DateTime64(3))"},
		{"UUID", "UUID", "UUID"},
		{" Nullable( String ) ", "Nullable(String)", "Nullable(String)"},
	}
	for _, tt := range tests {
		ct, err := ParseType(tt.in)
		if err != nil {
			t.Errorf("parseType(%q): %v", tt.in, err)
			continue
		}
		if got := ct.DDL(CapsFor(18, 16)); got != tt.old {
			t.Errorf("%q on 18.16 = %q, want %q", tt.in, got, tt.old)
		}
		if got := ct.DDL(CapsFor(25, 8)); got != tt.current {
			t.Errorf("%q on 25.8 = %q, want %q", tt.in, got, tt.current)
		}
		if !ct.SameType(tt.old) || !ct.SameType(tt.current) {
			t.Errorf("%q: sameType refuses its own rendering", tt.in)
		}
	}
	for _, bad := range []string{"Nullable(Nullable(Int8))", "Decimal(0, 0)", "Decimal(77, 1)", "DateTime64(10)", "DateTime64(3, UTC)",
		"DateTime('')", "Int", "LowCardinality(String)", "Array(Int8)", "string"} {
		if _, err := ParseType(bad); err == nil {
			t.Errorf("parseType(%q) accepted", bad)
		}
	}
	if caps := CapsFor(20, 1); !caps.DateTime64 || caps.BoolType {
		t.Errorf("capsFor(20.1) = %+v", caps)
	}
	if caps := CapsFor(19, 17); caps.DateTime64 {
		t.Errorf("capsFor(19.17) = %+v", caps)
	}
}

// TestSourceTypeRules: source_type names the PostgreSQL type and refuses,
// naming what to map it to, a ClickHouse type that cannot hold it.
func TestSourceTypeRules(t *testing.T) {
	const head = "source: {database: d, schema: s, table: t}\ntarget: {table: x}\nkey: [k]\ncolumns:\n  - {name: k, type: Int64}\n"
	for _, ok := range []string{
		"{name: c, type: Int16, source_type: smallint}", "{name: c, type: Int64, source_type: int2}",
		"{name: c, type: Int32, source_type: integer}", "{name: c, type: Int64, source_type: bigint}",
		"{name: c, type: 'Decimal(12, 2)', source_type: 'numeric(12,2)'}", "{name: c, type: String, source_type: numeric}",
		"{name: c, type: Float32, source_type: real}", "{name: c, type: Float64, source_type: real}",
		"{name: c, type: Float64, source_type: double precision}", "{name: c, type: Bool, source_type: boolean}",
		"{name: c, type: String, source_type: text}", "{name: c, type: String, max_length: 8, source_type: varchar(8)}",
		"{name: c, type: String, source_type: character varying(8)}", "{name: c, type: UUID, source_type: uuid}",
		"{name: c, type: String, source_type: uuid}", "{name: c, type: Date, source_type: date}",
		"{name: c, type: \"DateTime('UTC')\", source_type: timestamp}", "{name: c, type: \"DateTime64(6, 'UTC')\", source_type: timestamp(6)}",
		"{name: c, type: String, source_type: timestamp without time zone}", "{name: c, type: DateTime, source_type: timestamptz}",
		"{name: c, type: \"DateTime64(3, 'Europe/Paris')\", source_type: timestamp(3) with time zone}",
		"{name: c, type: Nullable(String), source_type: jsonb}", "{name: c, type: String, source_type: bytea}",
	} {
		if _, err := Parse("m.yaml", []byte(head+"  - "+ok+"\n")); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, tt := range []struct{ col, want string }{
		{"{name: c, type: Int16, source_type: integer}",
			`m.yaml:6:21: column "c": a PostgreSQL integer cannot be mapped to Int16; map it to Int32 or Int64`},
		{"{name: c, type: Float32, source_type: double precision}",
			`m.yaml:6:21: column "c": a PostgreSQL double precision cannot be mapped to Float32; map it to Float64`},
		{"{name: c, type: DateTime, source_type: timestamp}",
			`m.yaml:6:21: column "c": a PostgreSQL timestamp cannot be mapped to DateTime; map it to DateTime('UTC') (whole seconds), ` +
				`DateTime64(6, 'UTC') (ClickHouse 20.1 or newer) or String (YYYY-MM-DD hh:mm:ss.ffffff; a timestamp has no time zone ` +
				`and Debezium sends its wall-clock time as UTC, so only 'UTC' shows it unchanged)`},
		{"{name: c, type: Int64, source_type: timestamptz}",
			`m.yaml:6:21: column "c": a PostgreSQL timestamptz cannot be mapped to Int64; map it to DateTime or DateTime('tz') (whole seconds), ` +
				`DateTime64(6, 'UTC') (ClickHouse 20.1 or newer; any time zone) or String (YYYY-MM-DD hh:mm:ss.ffffff in UTC)`},
		{"{name: c, type: UUID, source_type: text}", `m.yaml:6:21: column "c": a PostgreSQL text cannot be mapped to UUID; map it to String`},
		{"{name: c, type: String, source_type: interval}",
			`m.yaml:6:42: column "c": source_type "interval" is not a PostgreSQL type changesink reads (supported: smallint, integer, bigint, ` +
				`numeric, numeric(p, s), real, double precision, boolean, text, varchar(n), uuid, date, timestamp, timestamptz, json, jsonb, bytea)`},
		{"{name: c, type: String, source_type: text(5)}",
			`m.yaml:6:42: column "c": source_type "text(5)" is not a PostgreSQL type changesink reads (supported: smallint, integer, bigint, ` +
				`numeric, numeric(p, s), real, double precision, boolean, text, varchar(n), uuid, date, timestamp, timestamptz, json, jsonb, bytea)`},
	} {
		_, err := Parse("m.yaml", []byte(head+"  - "+tt.col+"\n"))
		if err == nil || err.Error() != tt.want || !errors.Is(err, ErrMapping) {
			t.Errorf("%s:\n got %v\nwant %s", tt.col, err, tt.want)
		}
	}
}

// TestMappingAliases: YAML anchors and aliases are plain YAML (a
// name or type written once and reused). Aliases resolved everywhere but
// in the key and columns lists, which refused them with a wrong message
// ("expected a string", "a column must be a mapping").
func TestMappingAliases(t *testing.T) {
	m, err := Parse("m.yaml", []byte(`source: {database: &db shop, schema: public, table: t}
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
	if m.Target.Database != "shop" || len(m.Cols) != 3 || m.Cols[1].Type.Kind != KindDecimal || m.KeyNames() != "(id, code)" {
		t.Errorf("mapping %+v %+v %v", m.Target, m.Columns, m.Key)
	}
	_, err = Parse("m.yaml", []byte(`source: {database: d, schema: s, table: t}
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

// TestMappingLocalTimeZone: Go's time.LoadLocation("Local") is the
// process's own zone, not an IANA name; the mapping accepted
// DateTime('Local') and setup failed on the server's "Cannot load time zone
// Local" as an internal error. It is a mapping mistake, located.
func TestMappingLocalTimeZone(t *testing.T) {
	for _, typ := range []string{"DateTime('Local')", "DateTime64(3, 'Local')", "Nullable(DateTime('Local'))"} {
		_, err := Parse("m.yaml", []byte("source: {database: d, schema: s, table: t}\ntarget: {table: x}\nkey: [id]\n"+
			"columns:\n  - {name: id, type: Int64}\n  - {name: at, type: \""+typ+"\"}\n"))
		if err == nil || !strings.Contains(err.Error(), "m.yaml:6:") || !strings.Contains(err.Error(), "Local") {
			t.Errorf("%s: %v, want a mapping error on line 6", typ, err)
		}
	}
}

// TestYAMLKeys: the keys decodeMap knows are the ones yaml.v3 decodes
// into the struct: tags up to their options, lower-cased names of
// untagged fields, an inline struct's keys in its place; "-" and
// unexported fields are none.
func TestYAMLKeys(t *testing.T) {
	type inner struct {
		X int `yaml:"x"`
		Y int
	}
	type outer struct {
		A      int `yaml:"a"`
		B      int `yaml:"b,omitempty"`
		Plain  int
		Skip   int `yaml:"-"`
		hidden int
		In     inner `yaml:",inline"`
		Last   int   `yaml:"last,flow"`
	}
	_ = outer{}.hidden
	got := yamlKeys(reflect.TypeFor[outer]())
	if want := []string{"a", "b", "plain", "x", "y", "last"}; !slices.Equal(got, want) {
		t.Errorf("yamlKeys = %v, want %v", got, want)
	}
	// What the decoder does with it: every key known is decoded, none other is.
	var v outer
	if err := yaml.Unmarshal([]byte("{a: 1, b: 2, plain: 3, x: 4, y: 5, last: 6}"), &v); err != nil ||
		v != (outer{A: 1, B: 2, Plain: 3, In: inner{X: 4, Y: 5}, Last: 6}) {
		t.Errorf("yaml.v3 decoded %+v, %v", v, err)
	}
}
