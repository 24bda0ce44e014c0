package mapping

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/changesink/changesink/internal/outcome"
)

// Mapping describes one PostgreSQL table captured by Debezium and the
// ClickHouse table it is applied to. It is read from YAML by LoadMapping or
// ParseMapping, which reject unknown keys and report every mistake with its
// line and column. The YAML shape (defaults in brackets):
//
//	source:
//	  database: shop            # metadata.source.db every event must carry
//	  schema: public            # metadata.source.schema
//	  table: orders             # metadata.source.table
//	  deleted_field: deleted    # [deleted]  the trigger's deletedFieldName
//	  metadata_field: metadata  # [metadata] the trigger's metadataFieldName
//	target:
//	  database: default         # [default]
//	  table: orders_cdc
//	  create_database: false    # [false] setup also runs CREATE DATABASE IF NOT EXISTS
//	  live_view: orders_live    # [<table>_live] view of current rows (FINAL, deleted rows hidden)
//	  version_column: _cdc_lsn  # [_cdc_lsn]     UInt64, the ReplacingMergeTree version
//	  deleted_column: _cdc_deleted  # [_cdc_deleted] UInt8, 1 for a delete marker
//	key: [id]                   # the ORDER BY columns, in order; never Nullable or Float
//	columns:                    # every source column, in target order
//	  - name: id
//	    type: Int64
//	  - name: status
//	    type: String
//	    max_length: 32          # code points, as Python's len() counts (seed rule)
//	  - name: created_at
//	    type: String
//	    source_type: timestamp  # [none] the PostgreSQL type (pgType): checks the
//	                            # ClickHouse type, and says how a String holds it
//
// Column names are both the Debezium field names and the ClickHouse column
// names. Types are listed at parseType.
type Mapping struct {
	// File is the path the mapping was read from (for messages).
	File    string
	Source  Source
	Target  Target
	Key     []string
	Columns []Column

	Cols   []Col          // compiled columns, in Columns order
	KeyIdx []int          // indexes into cols of the key columns
	ByName map[string]int // column name → index into cols
}

// Source identifies the captured PostgreSQL table.
type Source struct {
	Database, Schema, Table string
	// DeletedField and MetadataField are the names the Debezium trigger
	// gives the delete marker and the metadata struct.
	DeletedField, MetadataField string
}

// Target is the ClickHouse table (and view) the changes are applied to.
type Target struct {
	Database, Table, LiveView    string
	CreateDatabase               bool
	VersionColumn, DeletedColumn string
}

// Column is one mapped column.
type Column struct {
	Name string
	// Type is the ClickHouse type as written in the mapping.
	Type string
	// MaxLength limits a String column's length in code points; 0 = no limit.
	MaxLength int
	// SourceType is the PostgreSQL type as written in the mapping; "" when
	// not given.
	SourceType string
}

// colSpec is a compiled column.
type Col struct {
	Name   string
	Type   Type
	MaxLen int
	IsKey  bool
	Source pgType // pgNone: source_type not given
}

// takesVarScale reports a column that reads Debezium's {scale, value}
// struct of an unconstrained numeric: a Decimal, or a String holding a
// numeric's text.
func (c *Col) TakesVarScale() bool { return c.Type.Kind == KindDecimal || c.Source == PGNumeric }

// Load reads and checks the mapping file at path. Errors are
// *MappingError (line and column of the mistake) matching ErrMapping,
// marked outcome.Config.
func Load(path string) (*Mapping, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, outcome.Config.Mark(&MappingError{File: path, Msg: fmt.Sprintf("cannot read the mapping file: %v", err)})
	}
	return Parse(path, data)
}

// Parse parses and checks a mapping; file names it in messages.
func Parse(file string, data []byte) (*Mapping, error) {
	m, err := parseMapping(data)
	if err != nil {
		var me *MappingError
		if errors.As(err, &me) {
			me.File = file
			return nil, outcome.Config.Mark(me)
		}
		return nil, outcome.Config.Mark(&MappingError{File: file, Msg: err.Error()})
	}
	m.File = file
	return m, nil
}

func parseMapping(data []byte) (*Mapping, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var raw rawMapping
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &MappingError{Msg: "the mapping is empty"}
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &MappingError{Line: extra.Line, Column: extra.Column, Msg: "a second YAML document; a mapping file holds one"}
	}
	if raw.node == nil {
		return nil, &MappingError{Msg: "the mapping is empty"}
	}
	return raw.compile()
}

// pos is a position in the YAML file.
type pos struct{ line, col int }

func at(n *yaml.Node) pos { return pos{n.Line, n.Column} }

func (p pos) errorf(format string, args ...any) error {
	return &MappingError{Line: p.line, Column: p.col, Msg: fmt.Sprintf(format, args...)}
}

// decodeMap decodes the mapping n into v, after refusing a node that is not
// a mapping, and unknown or repeated keys: the keys known are the yaml keys
// of v's fields (yamlKeys). v points to a plain copy of the caller's struct
// type (one without UnmarshalYAML, so decoding does not recurse).
func decodeMap(n *yaml.Node, v any, what string) error {
	allowed := YamlKeys(reflect.TypeOf(v).Elem())
	if n.Kind != yaml.MappingNode {
		return at(n).errorf("%s must be a mapping with the keys %s", what, strings.Join(allowed, ", "))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		known := false
		for _, a := range allowed {
			if k.Value == a {
				known = true
			}
		}
		if !known {
			return at(k).errorf("unknown key %q in %s (known keys: %s)", k.Value, what, strings.Join(allowed, ", "))
		}
		if seen[k.Value] {
			return at(k).errorf("key %q repeated in %s", k.Value, what)
		}
		seen[k.Value] = true
	}
	return n.Decode(v)
}

// yamlKeys lists, in field order, the keys yaml.v3 decodes into the struct
// type t: each exported field's yaml tag up to any option, or its name in
// lower case where the tag gives none, and the keys of an inline struct
// field in its place; a field tagged "-" is left out.
func YamlKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-":
			continue
		case slices.Contains(strings.Split(opts, ","), "inline") && f.Type.Kind() == reflect.Struct:
			keys = append(keys, YamlKeys(f.Type)...)
			continue
		case name == "":
			name = strings.ToLower(f.Name)
		}
		keys = append(keys, name)
	}
	return keys
}

// pval is a scalar of type T with its position; set is false when the key
// is absent.
type pval[T any] struct {
	v   T
	set bool
	p   pos
}

// decodeScalar reads the scalar n, which must carry tag; want says what was
// expected when it does not or does not decode.
func (s *pval[T]) decodeScalar(n *yaml.Node, tag, want string) error {
	if n.Kind != yaml.ScalarNode || n.Tag != tag {
		return at(n).errorf("%s", want)
	}
	if err := n.Decode(&s.v); err != nil {
		return at(n).errorf("%s: %v", want, err)
	}
	s.set, s.p = true, at(n)
	return nil
}

// pstr is a string scalar with its position. Any scalar but null is taken
// as written (a name such as 2024 or true stays text).
type pstr struct{ pval[string] }

func (s *pstr) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return at(n).errorf("expected a string")
	}
	s.v, s.set, s.p = n.Value, true, at(n)
	return nil
}

// pint is an integer scalar with its position.
type pint struct{ pval[int] }

func (s *pint) UnmarshalYAML(n *yaml.Node) error {
	return s.decodeScalar(n, "!!int", "expected an integer")
}

// pbool is a boolean scalar with its position.
type pbool struct{ pval[bool] }

func (s *pbool) UnmarshalYAML(n *yaml.Node) error {
	return s.decodeScalar(n, "!!bool", "expected true or false")
}

// resolveAlias returns the node an alias (*name) stands for; yaml.v3
// resolves aliases itself except in the list elements walked here by hand.
func resolveAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// plist is a YAML list of E (each decoded by its own UnmarshalYAML, aliases
// resolved) with the list's position; set is false when the key is absent.
type plist[E any, PE interface {
	*E
	UnmarshalYAML(*yaml.Node) error
}] struct {
	v   []E
	set bool
	p   pos
}

// decode reads the sequence n; a non-list is an error at n saying want.
func (s *plist[E, PE]) decode(n *yaml.Node, want string) error {
	if n.Kind != yaml.SequenceNode {
		return at(n).errorf("%s", want)
	}
	s.set, s.p = true, at(n)
	for _, c := range n.Content {
		var e E
		if err := PE(&e).UnmarshalYAML(resolveAlias(c)); err != nil {
			return err
		}
		s.v = append(s.v, e)
	}
	return nil
}

// pstrs is a list of strings with its position.
type pstrs struct{ plist[pstr, *pstr] }

func (s *pstrs) UnmarshalYAML(n *yaml.Node) error {
	return s.decode(n, "expected a list, as in [id]")
}

type rawSource struct {
	Database      pstr `yaml:"database"`
	Schema        pstr `yaml:"schema"`
	Table         pstr `yaml:"table"`
	DeletedField  pstr `yaml:"deleted_field"`
	MetadataField pstr `yaml:"metadata_field"`
	p             pos
}

func (r *rawSource) UnmarshalYAML(n *yaml.Node) error {
	type plain rawSource
	r.p = at(n)
	return decodeMap(n, (*plain)(r), "source")
}

type rawTarget struct {
	Database       pstr  `yaml:"database"`
	Table          pstr  `yaml:"table"`
	CreateDatabase pbool `yaml:"create_database"`
	LiveView       pstr  `yaml:"live_view"`
	VersionColumn  pstr  `yaml:"version_column"`
	DeletedColumn  pstr  `yaml:"deleted_column"`
	p              pos
}

func (r *rawTarget) UnmarshalYAML(n *yaml.Node) error {
	type plain rawTarget
	r.p = at(n)
	return decodeMap(n, (*plain)(r), "target")
}

//lint:ignore U1000 used through plist[rawColumn, *rawColumn] (staticcheck does not follow type parameters)
type rawColumn struct {
	Name       pstr `yaml:"name"`
	Type       pstr `yaml:"type"`
	MaxLength  pint `yaml:"max_length"`
	SourceType pstr `yaml:"source_type"`
	p          pos
}

//lint:ignore U1000 used through plist[rawColumn, *rawColumn]
func (r *rawColumn) UnmarshalYAML(n *yaml.Node) error {
	type plain rawColumn
	r.p = at(n)
	return decodeMap(n, (*plain)(r), "a column")
}

// rawColumns is the list of columns with its position.
type rawColumns struct{ plist[rawColumn, *rawColumn] }

func (s *rawColumns) UnmarshalYAML(n *yaml.Node) error {
	return s.decode(n, "columns must be a list of {"+strings.Join(YamlKeys(reflect.TypeFor[rawColumn]()), ", ")+"}")
}

type rawMapping struct {
	Source  *rawSource `yaml:"source"`
	Target  *rawTarget `yaml:"target"`
	Key     pstrs      `yaml:"key"`
	Columns rawColumns `yaml:"columns"`
	node    *yaml.Node
}

func (r *rawMapping) UnmarshalYAML(n *yaml.Node) error {
	type plain rawMapping
	if err := decodeMap(n, (*plain)(r), "the mapping"); err != nil {
		return err
	}
	r.node = n
	return nil
}

// identifier checks a database, table, view or column name. Any name is
// quoted when needed, but a few characters are refused because clickhouse-go
// strips them from INSERT column lists, and control characters and
// surrounding spaces are surely mistakes.
func identifier(s pstr, what string) error {
	switch {
	case s.v == "":
		return s.p.errorf("%s must not be empty", what)
	case len(s.v) > 200:
		return s.p.errorf("%s is longer than 200 bytes", what)
	case !utf8.ValidString(s.v):
		return s.p.errorf("%s is not valid UTF-8", what)
	case strings.TrimSpace(s.v) != s.v:
		return s.p.errorf("%s %q has leading or trailing spaces", what, s.v)
	case strings.ContainsAny(s.v, "`\"\\,()"):
		return s.p.errorf("%s %q contains one of ` \" \\ , ( ) (not supported)", what, s.v)
	}
	for _, r := range s.v {
		if unicode.IsControl(r) {
			return s.p.errorf("%s %q contains a control character", what, s.v)
		}
	}
	return nil
}

func required(s pstr, parent pos, what string) error {
	if !s.set {
		return parent.errorf("%s is required", what)
	}
	return identifier(s, what)
}

func orDefault(s pstr, def string) pstr {
	if !s.set {
		return pstr{pval[string]{v: def, set: true, p: s.p}}
	}
	return s
}

func (r *rawMapping) compile() (*Mapping, error) {
	top := at(r.node)
	if r.Source == nil {
		return nil, top.errorf("source is required (database, schema, table)")
	}
	if r.Target == nil {
		return nil, top.errorf("target is required (table)")
	}
	src, tgt := r.Source, r.Target
	for _, c := range []struct {
		s    pstr
		what string
	}{{src.Database, "source.database"}, {src.Schema, "source.schema"}, {src.Table, "source.table"}, {tgt.Table, "target.table"}} {
		parent := src.p
		if strings.HasPrefix(c.what, "target") {
			parent = tgt.p
		}
		if err := required(c.s, parent, c.what); err != nil {
			return nil, err
		}
	}
	deletedField := orDefault(src.DeletedField, "deleted")
	metadataField := orDefault(src.MetadataField, "metadata")
	database := orDefault(tgt.Database, "default")
	liveView := orDefault(tgt.LiveView, tgt.Table.v+"_live")
	version := orDefault(tgt.VersionColumn, "_cdc_lsn")
	deleted := orDefault(tgt.DeletedColumn, "_cdc_deleted")
	for _, c := range []struct {
		s    pstr
		what string
	}{{deletedField, "source.deleted_field"}, {metadataField, "source.metadata_field"}, {database, "target.database"},
		{liveView, "target.live_view"}, {version, "target.version_column"}, {deleted, "target.deleted_column"}} {
		if err := identifier(c.s, c.what); err != nil {
			return nil, err
		}
	}
	if deletedField.v == metadataField.v {
		return nil, metadataField.p.errorf("source.metadata_field and source.deleted_field are both %q", deletedField.v)
	}
	if version.v == deleted.v {
		return nil, deleted.p.errorf("target.version_column and target.deleted_column are both %q", version.v)
	}
	if liveView.v == tgt.Table.v {
		return nil, liveView.p.errorf("target.live_view must differ from target.table")
	}
	for _, side := range []struct{ name, what string }{{tgt.Table.v + "_ledger", "ledger"}, {tgt.Table.v + "_lock", "lock"}} {
		if liveView.v == side.name {
			return nil, liveView.p.errorf("target.live_view %q is the name of the %s table changesink keeps next to %s; choose another name", liveView.v, side.what, tgt.Table.v)
		}
	}
	m := &Mapping{
		Source: Source{Database: src.Database.v, Schema: src.Schema.v, Table: src.Table.v,
			DeletedField: deletedField.v, MetadataField: metadataField.v},
		Target: Target{Database: database.v, Table: tgt.Table.v, LiveView: liveView.v, CreateDatabase: tgt.CreateDatabase.v,
			VersionColumn: version.v, DeletedColumn: deleted.v},
		ByName: map[string]int{},
	}
	if !r.Columns.set || len(r.Columns.v) == 0 {
		p := r.Columns.p
		if !r.Columns.set {
			p = top
		}
		return nil, p.errorf("columns is required: a list of {name, type} with at least the key columns")
	}
	for _, rc := range r.Columns.v {
		if err := required(rc.Name, rc.p, "column name"); err != nil {
			return nil, err
		}
		name := rc.Name.v
		if _, dup := m.ByName[name]; dup {
			return nil, rc.Name.p.errorf("column %q is listed twice", name)
		}
		switch name {
		case version.v, deleted.v:
			return nil, rc.Name.p.errorf("column %q collides with the version or deleted column; rename them under target", name)
		case deletedField.v, metadataField.v:
			return nil, rc.Name.p.errorf("column %q collides with the trigger's %q field; set source.deleted_field/metadata_field to the names the trigger uses", name, name)
		}
		if !rc.Type.set {
			return nil, rc.p.errorf("column %q needs a type", name)
		}
		t, err := ParseType(rc.Type.v)
		if err != nil {
			return nil, rc.Type.p.errorf("column %q: %v", name, err)
		}
		spec := Col{Name: name, Type: t}
		if rc.MaxLength.set {
			if t.Kind != KindString {
				return nil, rc.MaxLength.p.errorf("column %q: max_length applies to String columns only", name)
			}
			if rc.MaxLength.v < 1 {
				return nil, rc.MaxLength.p.errorf("column %q: max_length must be at least 1", name)
			}
			spec.MaxLen = rc.MaxLength.v
		}
		if rc.SourceType.set {
			src, err := parsePGType(rc.SourceType.v)
			if err != nil {
				return nil, rc.SourceType.p.errorf("column %q: %v", name, err)
			}
			if !src.allows(t) {
				return nil, rc.Type.p.errorf("column %q: a PostgreSQL %s cannot be mapped to %s; map it to %s", name, src, t, src.mapsTo())
			}
			spec.Source = src
		}
		m.ByName[name] = len(m.Cols)
		m.Cols = append(m.Cols, spec)
		m.Columns = append(m.Columns, Column{Name: name, Type: rc.Type.v, MaxLength: spec.MaxLen, SourceType: rc.SourceType.v})
	}
	if !r.Key.set || len(r.Key.v) == 0 {
		p := r.Key.p
		if !r.Key.set {
			p = top
		}
		return nil, p.errorf("key is required: the list of key columns, as in [id]")
	}
	seenKey := map[string]bool{}
	for _, k := range r.Key.v {
		i, ok := m.ByName[k.v]
		if !ok {
			return nil, k.p.errorf("key column %q is not in columns", k.v)
		}
		if seenKey[k.v] {
			return nil, k.p.errorf("key column %q is listed twice", k.v)
		}
		seenKey[k.v] = true
		t := m.Cols[i].Type
		if t.Nullable {
			return nil, k.p.errorf("key column %q must not be Nullable (ClickHouse cannot ORDER BY it)", k.v)
		}
		if t.Kind == KindFloat32 || t.Kind == KindFloat64 {
			return nil, k.p.errorf("key column %q must not be a Float (equality on floats is not a key)", k.v)
		}
		m.Cols[i].IsKey = true
		m.KeyIdx = append(m.KeyIdx, i)
		m.Key = append(m.Key, k.v)
	}
	return m, nil
}

// keyNames renders the key columns for messages: "id" or "(a, b)".
func (m *Mapping) KeyNames() string {
	if len(m.Key) == 1 {
		return m.Key[0]
	}
	return "(" + strings.Join(m.Key, ", ") + ")"
}
