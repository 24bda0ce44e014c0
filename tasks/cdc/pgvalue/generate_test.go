package pgvalue

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/mapping"
)

var (
	caps1816 = mapping.CapsFor(18, 16)
	capsNew  = mapping.CapsFor(26, 9) // a current server: every type
	caps2008 = mapping.CapsFor(20, 8) // DateTime64, no Decimal256
)

func TestGenerate(t *testing.T) {
	for _, tt := range []struct {
		name    string
		pg      string
		notNull bool
		key     bool
		caps    mapping.ServerCaps
		want    mapping.Column // Name "c"
	}{
		{"smallint", "smallint", false, false, capsNew, mapping.Column{Type: "Nullable(Int16)", SourceType: "smallint"}},
		{"integer not null", "integer", true, false, capsNew, mapping.Column{Type: "Int32", SourceType: "integer"}},
		{"bigint key", "bigint", false, true, caps1816, mapping.Column{Type: "Int64", SourceType: "bigint"}},
		{"numeric(12,2)", "numeric(12,2)", true, false, caps1816, mapping.Column{Type: "Decimal(12, 2)", SourceType: "numeric(12,2)"}},
		{"numeric(38,0) on 18.16", "numeric(38,0)", true, false, caps1816, mapping.Column{Type: "Decimal(38, 0)", SourceType: "numeric(38,0)"}},
		{"numeric(39,2) on 18.16", "numeric(39,2)", true, false, caps1816, mapping.Column{Type: "String", SourceType: "numeric(39,2)"}},
		{"numeric(39,2) on 20.8", "numeric(39,2)", true, false, caps2008, mapping.Column{Type: "String", SourceType: "numeric(39,2)"}},
		{"numeric(76,10) on a current server", "numeric(76,10)", false, false, capsNew, mapping.Column{Type: "Nullable(Decimal(76, 10))", SourceType: "numeric(76,10)"}},
		{"numeric(77,0)", "numeric(77,0)", true, false, capsNew, mapping.Column{Type: "String", SourceType: "numeric(77,0)"}},
		{"numeric(3,-2)", "numeric(3,-2)", true, false, caps1816, mapping.Column{Type: "Decimal(5, 0)", SourceType: "numeric(3,-2)"}},
		{"numeric(2,5)", "numeric(2,5)", true, false, caps1816, mapping.Column{Type: "Decimal(5, 5)", SourceType: "numeric(2,5)"}},
		{"numeric", "numeric", false, false, capsNew, mapping.Column{Type: "Nullable(String)", SourceType: "numeric"}},
		{"numeric key", "numeric", false, true, capsNew, mapping.Column{Type: "String", SourceType: "numeric"}},
		{"real", "real", false, false, capsNew, mapping.Column{Type: "Nullable(Float32)", SourceType: "real"}},
		{"double", "double precision", true, false, capsNew, mapping.Column{Type: "Float64", SourceType: "double precision"}},
		{"boolean", "boolean", false, false, caps1816, mapping.Column{Type: "Nullable(Bool)", SourceType: "boolean"}},
		{"text", "text", false, false, capsNew, mapping.Column{Type: "Nullable(String)", SourceType: "text"}},
		{"varchar(8)", "varchar(8)", true, false, capsNew, mapping.Column{Type: "String", MaxLength: 8, SourceType: "varchar(8)"}},
		{"varchar", "varchar", true, false, capsNew, mapping.Column{Type: "String", SourceType: "varchar"}},
		{"char(3) key", "char(3)", false, true, capsNew, mapping.Column{Type: "String", MaxLength: 3, SourceType: "char(3)"}},
		{"json", "json", false, false, capsNew, mapping.Column{Type: "Nullable(String)", SourceType: "json"}},
		{"jsonb", "jsonb", true, false, capsNew, mapping.Column{Type: "String", SourceType: "jsonb"}},
		{"bytea", "bytea", false, false, capsNew, mapping.Column{Type: "Nullable(String)", SourceType: "bytea"}},
		{"uuid key", "uuid", false, true, caps1816, mapping.Column{Type: "UUID", SourceType: "uuid"}},
		{"date", "date", false, false, capsNew, mapping.Column{Type: "Nullable(String)", SourceType: "date"}},
		{"date key", "date", true, true, caps1816, mapping.Column{Type: "String", SourceType: "date"}},
		{"timestamp on a current server", "timestamp", false, false, capsNew, mapping.Column{Type: "Nullable(DateTime64(6, 'UTC'))", SourceType: "timestamp"}},
		{"timestamp(3) on a current server", "timestamp(3)", true, false, capsNew, mapping.Column{Type: "DateTime64(6, 'UTC')", SourceType: "timestamp(3)"}},
		{"timestamp on 18.16", "timestamp", false, false, caps1816, mapping.Column{Type: "Nullable(String)", SourceType: "timestamp"}},
		{"timestamptz on a current server", "timestamptz", true, false, capsNew, mapping.Column{Type: "DateTime64(6, 'UTC')", SourceType: "timestamptz"}},
		{"timestamptz key on 18.16", "timestamptz", true, true, caps1816, mapping.Column{Type: "String", SourceType: "timestamptz"}},
		{"time", "time", false, false, capsNew, mapping.Column{Type: "Nullable(String)"}},
		{"timetz", "timetz", true, false, capsNew, mapping.Column{Type: "String"}},
	} {
		c := sourceColumn(t, "c", tt.pg)
		c.NotNull, c.Key = tt.notNull, tt.key
		got, err := Generate("public.t", c, tt.caps)
		tt.want.Name = "c"
		if err != nil || got != tt.want {
			t.Errorf("%s: got %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

// TestGenerateRefuses: a type no mapping is generated for is refused
// naming the table, the column and the type, and the type to map it to:
// Nullable(String) where the column allows NULL, so that following the
// message keeps its NULLs.
func TestGenerateRefuses(t *testing.T) {
	for _, tt := range []struct {
		name, pg     string
		notNull, key bool
		says         string
	}{
		{"interval", "interval", false, false, `table public.t, column "c" (interval): no generated mapping for the column's type; map it to Nullable(String) in a mapping entry`},
		{"interval not null", "interval", true, false, `table public.t, column "c" (interval): no generated mapping for the column's type; map it to String in a mapping entry`},
		{"array", "integer[]", false, false, "(integer[])"},
		{"inet", "inet", false, false, "(inet)"},
		{"an unknown type without a name", "", false, false, "(type OID 16400)"},
		{"a real key", "real", false, true, "a key cannot be a Float in ClickHouse: map it to String"},
		{"a double key", "double precision", true, true, "(double precision)"},
	} {
		c := Column{Name: "c", TypeOID: 16400, TypeMod: -1}
		if tt.pg != "" {
			c = sourceColumn(t, "c", tt.pg)
		}
		c.NotNull, c.Key = tt.notNull, tt.key
		_, err := Generate("public.t", c, capsNew)
		var ce *ColumnError
		if !errors.Is(err, ErrUnsupportedType) || !errors.As(err, &ce) || ce.Table != "public.t" || ce.Column != "c" {
			t.Errorf("%s: got %v, want a *ColumnError of ErrUnsupportedType", tt.name, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.says) || len(err.Error()) > 200 {
			t.Errorf("%s: the message %q (%d characters) should say %q in at most 200", tt.name, err, len(err.Error()), tt.says)
		}
	}
}

// TestGeneratedHoldsEveryCase: on each server, a generated mapping of
// every case's column is a valid mapping whose decoder takes the column,
// and it holds every case's value, nullable or not, exactly (the value
// read back as PostgreSQL prints it, TestServerText); the one exception
// documented is a timestamp outside DateTime64's range or ±infinity, refused
// with ErrOutOfRange or ErrSpecialValue.
func TestGeneratedHoldsEveryCase(t *testing.T) {
	for _, caps := range []mapping.ServerCaps{caps1816, caps2008, capsNew} {
		var cases []textCase
		for _, c := range textCases {
			if c.pg == "interval" || c.pg == "integer[]" || c.pg == "inet" {
				continue
			}
			cases = append(cases, c)
		}
		var b strings.Builder
		b.WriteString("source: {database: d, schema: public, table: edge}\ntarget: {table: edge_cdc}\nkey: [id]\ncolumns:\n  - {name: id, type: Int32}\n")
		for i, c := range cases {
			col, err := Generate("public.edge", sourceColumn(t, fmt.Sprintf("c%d", i), c.pg), caps)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			fmt.Fprintf(&b, "  - {name: %s, type: %q", col.Name, col.Type)
			if col.MaxLength > 0 {
				fmt.Fprintf(&b, ", max_length: %d", col.MaxLength)
			}
			if col.SourceType != "" {
				fmt.Fprintf(&b, ", source_type: %q", col.SourceType)
			}
			b.WriteString("}\n")
		}
		yaml := b.String()
		m, err := mapping.Parse("generated", []byte(yaml))
		if err != nil {
			t.Fatalf("the generated mapping: %v\n%s", err, yaml)
		}
		for i, c := range cases {
			d, err := NewDecoder(sourceColumn(t, "c", c.pg), &m.Cols[i+1])
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			_, err = d.Text([]byte(c.text))
			timestamp := strings.HasPrefix(c.pg, "timestamp") && caps.DateTime64
			switch {
			case err == nil:
			case timestamp && (errors.Is(err, ErrOutOfRange) || errors.Is(err, ErrSpecialValue)):
			default:
				t.Errorf("%s (%s) on %+v: %v", c.name, m.Cols[i+1].Type, caps, err)
			}
		}
	}
}

// TestCheckNullable: a mapping that maps a source column allowing NULL to a
// type that is not Nullable is refused before any value is read, naming
// the type to write; a NOT NULL column, a key column (the catalog's or the
// mapping's) and a Nullable type pass, as does every generated mapping.
func TestCheckNullable(t *testing.T) {
	src := []Column{
		{Name: "id", TypeOID: 23, TypeMod: -1, NotNull: true, Key: true},
		{Name: "n", TypeOID: 25, TypeMod: -1, NotNull: true},
		{Name: "c", TypeOID: 600, TypeMod: -1, TypeName: "point"},
		{Name: "k", TypeOID: 23, TypeMod: -1},
	}
	for _, tt := range []struct {
		name, cols, key, says string // says "": accepted
	}{
		{"Nullable", "{name: n, type: String}, {name: c, type: Nullable(String)}, {name: k, type: Nullable(Int32)}", "[id]", ""},
		{"String for a column that allows NULL", "{name: n, type: String}, {name: c, type: String}, {name: k, type: Nullable(Int32)}", "[id]",
			`table public.t, column "c" (point): the mapping does not fit the source column's type: the source column allows NULL; ` +
				"the mapping's String cannot hold it: map it as Nullable(String)"},
		{"an integer for a column that allows NULL", "{name: n, type: String}, {name: c, type: Nullable(String)}, {name: k, type: Int64}", "[id]",
			"the mapping's Int64 cannot hold it: map it as Nullable(Int64)"},
		{"a column of the mapping's key", "{name: n, type: String}, {name: c, type: Nullable(String)}, {name: k, type: Int32}", "[id, k]", ""},
		{"a column the mapping leaves out", "{name: n, type: String}", "[id]", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := mapping.Parse("m.yaml", []byte("source: {database: d, schema: public, table: t}\ntarget: {table: t}\nkey: "+tt.key+
				"\ncolumns: [{name: id, type: Int32}, "+tt.cols+"]\n"))
			if err != nil {
				t.Fatal(err)
			}
			err = CheckNullable("public.t", src, m)
			if tt.says == "" {
				if err != nil {
					t.Errorf("CheckNullable: %v", err)
				}
				return
			}
			var ce *ColumnError
			if !errors.Is(err, ErrNullable) || !errors.Is(err, ErrWrongType) || !errors.As(err, &ce) || ce.Table != "public.t" ||
				!strings.Contains(err.Error(), tt.says) || len(err.Error()) > 200 {
				t.Errorf("CheckNullable: %v (%d characters), want an ErrNullable saying %q in at most 200", err, len(err.Error()), tt.says)
			}
		})
	}
	// Every column of every type, generated: Nullable where it allows NULL.
	for _, c := range textCases {
		if c.pg == "interval" || c.pg == "integer[]" || c.pg == "inet" {
			continue
		}
		for _, notNull := range []bool{false, true} {
			col := sourceColumn(t, "c", c.pg)
			col.NotNull = notNull
			gen, err := Generate("public.t", col, capsNew)
			if err != nil {
				t.Fatal(err)
			}
			m, err := mapping.Parse("m.yaml", []byte(fmt.Sprintf("source: {database: d, schema: public, table: t}\ntarget: {table: t}\nkey: [id]\n"+
				"columns: [{name: id, type: Int32}, {name: c, type: %q}]\n", gen.Type)))
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckNullable("public.t", []Column{src[0], col}, m); err != nil || m.Cols[1].Type.Nullable == notNull {
				t.Errorf("%s (not null %v): generated %s; CheckNullable: %v", c.pg, notNull, gen.Type, err)
			}
		}
	}
}

// TestOmitGenerated: where the stream does not carry generated columns,
// they are left out of the columns to map, with a note naming them; a
// mapping entry that names one is refused, naming the table and the
// column; where the stream carries them, nothing changes.
func TestOmitGenerated(t *testing.T) {
	cols := []Column{
		{Name: "id", TypeOID: 23, TypeMod: -1, NotNull: true, Key: true},
		{Name: "a", TypeOID: 23, TypeMod: -1},
		{Name: "twice", TypeOID: 23, TypeMod: -1, Generated: true},
		{Name: "label", TypeOID: 25, TypeMod: -1, Generated: true},
	}
	names := func(cs []Column) string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return strings.Join(out, ",")
	}
	entry := func(names ...string) func(string) bool {
		return func(n string) bool { return slices.Contains(names, n) }
	}
	for _, tt := range []struct {
		name     string
		cols     []Column
		streamed bool
		named    func(string) bool
		keep     string
		note     string // "": none
		err      string // "": none
	}{
		{"left out with a note", cols, false, nil, "id,a",
			`table public.g: generated column "twice", "label" left out of its target: pgoutput does not stream generated columns before PostgreSQL 18 ` +
				"(on 18: publish_generated_columns = stored); a view or query can compute it from the columns it is made of", ""},
		{"an entry naming other columns", cols, false, entry("a"), "id,a", "generated column", ""},
		{"an entry naming one", cols, false, entry("a", "label"), "", "",
			`table public.g, column "label" (text): pgoutput does not stream the generated column (before PostgreSQL 18, or without ` +
				"publish_generated_columns = stored): its target column would be NULL after every streamed change"},
		{"streamed", cols, true, entry("label"), "id,a,twice,label", "", ""},
		{"no generated column", cols[:2], false, nil, "id,a", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			keep, note, err := OmitGenerated("public.g", tt.cols, tt.streamed, tt.named)
			if tt.err != "" {
				var ce *ColumnError
				if !errors.Is(err, ErrGeneratedColumn) || !errors.As(err, &ce) || err.Error() != tt.err {
					t.Errorf("error\n got %v\nwant %s", err, tt.err)
				}
				return
			}
			if err != nil || names(keep) != tt.keep || (tt.note == "") != (note == "") || !strings.Contains(note, tt.note) {
				t.Errorf("got %s, %q, %v; want %s, %q", names(keep), note, err, tt.keep, tt.note)
			}
		})
	}
	for _, tt := range []struct {
		version   int
		publishes bool
		want      bool
	}{{150018, true, false}, {170005, true, false}, {180000, false, false}, {180000, true, true}, {190000, true, true}} {
		if got := StreamsGenerated(tt.version, tt.publishes); got != tt.want {
			t.Errorf("StreamsGenerated(%d, %v) = %v", tt.version, tt.publishes, got)
		}
	}
}
