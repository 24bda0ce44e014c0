package mapping

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/changesink/changesink/internal/outcome"
)

// Mapping describes one PostgreSQL table captured by Debezium and the
// ClickHouse table it is applied to. It is read from YAML by Load or
// Parse, which reject unknown keys and report every mistake with its
// line and column. The YAML shape (defaults in brackets):
//
//	source:
//	  database: shop            # metadata.source.db every event must carry
//	  schema: public            # metadata.source.schema
//	  table: orders             # metadata.source.table
//	  deleted_field: deleted    # [deleted]  the trigger's deletedFieldName
//	  metadata_field: metadata  # [metadata] the trigger's metadataFieldName
//	  partial_snapshots: false  # [false] true: a snapshot may leave rows out (Debezium's
//	                            # snapshot.select.statement.overrides, a filtered ad hoc snapshot),
//	                            # so its end deletes nothing (see Source.PartialSnapshots)
//	target:
//	  database: default         # [default]
//	  table: orders_cdc
//	  create_database: false    # [false] setup also runs CREATE DATABASE IF NOT EXISTS
//	  live_view: orders_live    # [<table>_live] view of current rows (FINAL, deleted rows hidden)
//	  version_column: _cdc_lsn  # [_cdc_lsn]     UInt64, the ReplacingMergeTree version
//	  deleted_column: _cdc_deleted  # [_cdc_deleted] UInt8, 1 for a delete marker
//	  cluster: analytics        # [none] a cluster of remote_servers: setup creates the target ON CLUSTER
//	                            # with Replicated engines, and every write waits for every replica
//	                            # of the shard (docs/design/clickhouse-cluster.md)
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
	// PartialSnapshots: the trigger's snapshots may leave rows of the
	// table out. When false (the default), a snapshot's last row ends a
	// complete read of the table at its point S: every key the target
	// holds live below S that no row of the snapshot holds was deleted
	// before S, and gets a delete marker at S (a TRUNCATE the trigger
	// dropped, deletes before its offsets were reset).
	PartialSnapshots bool
}

// Target is the ClickHouse table (and view) the changes are applied to.
type Target struct {
	Database, Table, LiveView    string
	CreateDatabase               bool
	VersionColumn, DeletedColumn string
	// Cluster is the ClickHouse cluster (remote_servers) the target is
	// replicated on; "" for a target on one server.
	Cluster string
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

// Col is a compiled column.
type Col struct {
	Name   string
	Type   Type
	MaxLen int
	IsKey  bool
	Source pgType // pgNone: source_type not given
}

// TakesVarScale reports a column that reads Debezium's {scale, value}
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
	var raw rawTable
	d, err := decodeDoc(data, &raw, "the mapping")
	if err != nil {
		return nil, err
	}
	return compile(d, nil, raw)
}

// identifier checks a database, table, view or column name. Any name is
// quoted when needed, but a few characters are refused because clickhouse-go
// strips them from INSERT column lists, and control characters and
// surrounding spaces are surely mistakes.
func identifier(v string, p pos, what string) error {
	switch {
	case v == "":
		return p.errorf("%s must not be empty", what)
	case len(v) > 200:
		return p.errorf("%s is longer than 200 bytes", what)
	case !utf8.ValidString(v):
		return p.errorf("%s is not valid UTF-8", what)
	case strings.TrimSpace(v) != v:
		return p.errorf("%s %q has leading or trailing spaces", what, v)
	case strings.ContainsAny(v, "`\"\\,()"):
		return p.errorf("%s %q contains one of ` \" \\ , ( ) (not supported)", what, v)
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return p.errorf("%s %q contains a control character", what, v)
		}
	}
	return nil
}

// clusterName checks target.cluster: the name of a cluster in the
// servers' remote_servers, an XML element name.
func clusterName(v string, p pos) error {
	if !clusterNameRE.MatchString(v) {
		return p.errorf("target.cluster %q is not a cluster name (letters, digits, _ . -; as remote_servers names it)", v)
	}
	return nil
}

var clusterNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,199}$`)

// compile checks the table entry r, found at path in d, and builds its
// Mapping.
func compile(d doc, path []any, r rawTable) (*Mapping, error) {
	p := func(more ...any) pos { return d.at(append(slices.Clone(path), more...)...) }
	if r.Source == nil {
		return nil, p().errorf("source is required (database, schema, table)")
	}
	if r.Target == nil {
		return nil, p().errorf("target is required (table)")
	}
	src, tgt := r.Source, r.Target
	for _, c := range []struct {
		v          *string
		side, name string
	}{{src.Database, "source", "database"}, {src.Schema, "source", "schema"}, {src.Table, "source", "table"}, {tgt.Table, "target", "table"}} {
		if c.v == nil {
			return nil, p(c.side).errorf("%s.%s is required", c.side, c.name)
		}
		if err := identifier(*c.v, p(c.side, c.name), c.side+"."+c.name); err != nil {
			return nil, err
		}
	}
	table := *tgt.Table
	names := []struct {
		v          string
		side, name string
	}{
		{orDefault(src.DeletedField, "deleted"), "source", "deleted_field"},
		{orDefault(src.MetadataField, "metadata"), "source", "metadata_field"},
		{orDefault(tgt.Database, "default"), "target", "database"},
		{orDefault(tgt.LiveView, table+"_live"), "target", "live_view"},
		{orDefault(tgt.VersionColumn, "_cdc_lsn"), "target", "version_column"},
		{orDefault(tgt.DeletedColumn, "_cdc_deleted"), "target", "deleted_column"},
	}
	for _, c := range names {
		if err := identifier(c.v, p(c.side, c.name), c.side+"."+c.name); err != nil {
			return nil, err
		}
	}
	deletedField, metadataField, database, liveView, version, deleted := names[0].v, names[1].v, names[2].v, names[3].v, names[4].v, names[5].v
	if deletedField == metadataField {
		return nil, p("source", "metadata_field").errorf("source.metadata_field and source.deleted_field are both %q", deletedField)
	}
	if version == deleted {
		return nil, p("target", "deleted_column").errorf("target.version_column and target.deleted_column are both %q", version)
	}
	if liveView == table {
		return nil, p("target", "live_view").errorf("target.live_view must differ from target.table")
	}
	for _, side := range []struct{ name, what string }{{table + "_ledger", "ledger"}, {table + "_lock", "lock"}} {
		if liveView == side.name {
			return nil, p("target", "live_view").errorf("target.live_view %q is the name of the %s table changesink keeps next to %s; choose another name", liveView, side.what, table)
		}
	}
	if tgt.Cluster != nil {
		if err := clusterName(*tgt.Cluster, p("target", "cluster")); err != nil {
			return nil, err
		}
	}
	m := &Mapping{
		Source: Source{Database: *src.Database, Schema: *src.Schema, Table: *src.Table,
			DeletedField: deletedField, MetadataField: metadataField, PartialSnapshots: src.PartialSnapshots != nil && *src.PartialSnapshots},
		Target: Target{Database: database, Table: table, LiveView: liveView, CreateDatabase: tgt.CreateDatabase != nil && *tgt.CreateDatabase,
			VersionColumn: version, DeletedColumn: deleted, Cluster: str(tgt.Cluster)},
		ByName: map[string]int{},
	}
	if r.Columns == nil || len(*r.Columns) == 0 {
		return nil, p("columns").errorf("columns is required: a list of {name, type} with at least the key columns")
	}
	for i, rc := range *r.Columns {
		spec, err := compileColumn(m, rc, func(more ...any) pos { return p(append([]any{"columns", i}, more...)...) })
		if err != nil {
			return nil, err
		}
		m.ByName[spec.Name] = len(m.Cols)
		m.Cols = append(m.Cols, spec)
		m.Columns = append(m.Columns, Column{Name: spec.Name, Type: *rc.Type, MaxLength: spec.MaxLen, SourceType: str(rc.SourceType)})
	}
	if r.Key == nil || len(*r.Key) == 0 {
		return nil, p("key").errorf("key is required: the list of key columns, as in [id]")
	}
	seenKey := map[string]bool{}
	for n, k := range *r.Key {
		kp := p("key", n)
		i, ok := m.ByName[k]
		if !ok {
			return nil, kp.errorf("key column %q is not in columns", k)
		}
		if seenKey[k] {
			return nil, kp.errorf("key column %q is listed twice", k)
		}
		seenKey[k] = true
		t := m.Cols[i].Type
		if t.Nullable {
			return nil, kp.errorf("key column %q must not be Nullable (ClickHouse cannot ORDER BY it)", k)
		}
		if t.Kind == KindFloat32 || t.Kind == KindFloat64 {
			return nil, kp.errorf("key column %q must not be a Float (equality on floats is not a key)", k)
		}
		m.Cols[i].IsKey = true
		m.KeyIdx = append(m.KeyIdx, i)
		m.Key = append(m.Key, k)
	}
	return m, nil
}

// compileColumn checks one column entry of m; p locates a key of it.
func compileColumn(m *Mapping, rc rawColumn, p func(...any) pos) (Col, error) {
	if rc.Name == nil {
		return Col{}, p().errorf("column name is required")
	}
	name := *rc.Name
	if err := identifier(name, p("name"), "column name"); err != nil {
		return Col{}, err
	}
	if _, dup := m.ByName[name]; dup {
		return Col{}, p("name").errorf("column %q is listed twice", name)
	}
	switch name {
	case m.Target.VersionColumn, m.Target.DeletedColumn:
		return Col{}, p("name").causef(ErrMetaColumnName, "table %s.%s: column %q is named like the target's version column (%s) or delete-marker column (%s)",
			m.Source.Schema, m.Source.Table, name, m.Target.VersionColumn, m.Target.DeletedColumn)
	case m.Source.DeletedField, m.Source.MetadataField:
		return Col{}, p("name").errorf("column %q collides with the trigger's %q field; set source.deleted_field/metadata_field to the names the trigger uses", name, name)
	}
	if rc.Type == nil {
		return Col{}, p().errorf("column %q needs a type", name)
	}
	t, err := ParseType(*rc.Type)
	if err != nil {
		return Col{}, p("type").errorf("column %q: %v", name, err)
	}
	spec := Col{Name: name, Type: t}
	if rc.MaxLength != nil {
		if t.Kind != KindString {
			return Col{}, p("max_length").errorf("column %q: max_length applies to String columns only", name)
		}
		if *rc.MaxLength < 1 {
			return Col{}, p("max_length").errorf("column %q: max_length must be at least 1", name)
		}
		spec.MaxLen = *rc.MaxLength
	}
	if rc.SourceType != nil {
		src, err := parsePGType(*rc.SourceType)
		if err != nil {
			return Col{}, p("source_type").errorf("column %q: %v", name, err)
		}
		if !src.allows(t) {
			return Col{}, p("type").errorf("column %q: a PostgreSQL %s cannot be mapped to %s; map it to %s", name, src, t, src.mapsTo())
		}
		spec.Source = src
	}
	return spec, nil
}

// KeyNames renders the key columns for messages: "id" or "(a, b)".
func (m *Mapping) KeyNames() string {
	if len(m.Key) == 1 {
		return m.Key[0]
	}
	return "(" + strings.Join(m.Key, ", ") + ")"
}

// With returns a copy of m with the column c added after its columns (a
// column the source added, which cdc sync adds to the target), checked as
// a mapping file's columns are.
func (m *Mapping) With(c Column) (*Mapping, error) {
	rc := rawColumn{Name: &c.Name, Type: &c.Type}
	if c.SourceType != "" {
		rc.SourceType = &c.SourceType
	}
	if c.MaxLength > 0 {
		rc.MaxLength = &c.MaxLength
	}
	out := *m
	out.Cols, out.Columns, out.ByName = slices.Clone(m.Cols), slices.Clone(m.Columns), maps.Clone(m.ByName)
	col, err := compileColumn(&out, rc, func(...any) pos { return pos{} })
	if err != nil {
		var me *MappingError
		if errors.As(err, &me) {
			me.File = m.File
		}
		return nil, outcome.Config.Mark(err)
	}
	out.ByName[col.Name] = len(out.Cols)
	out.Cols = append(out.Cols, col)
	out.Columns = append(out.Columns, c)
	return &out, nil
}
