package mapping

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/changesink/changesink/internal/outcome"
)

// A Set is a mapping file for many tables, as cdc sync reads one slot's
// publication into many targets:
//
//	defaults:                   # any key of a table, for every table
//	  source: {database: shop, schema: public}
//	  target: {database: analytics, table: "{table}"}   # the target name pattern
//	  schema_changes: follow
//	tables:
//	  - source: {table: orders}
//	    target: {table: orders_cdc}
//	    key: [id]
//	    columns: [...]          # the whole table, or only overrides (sync)
//	  - source: {schema: sales, table: orders}
//	    target: {table: sales_orders}
//
// A file of one table (the Mapping form) is a Set of that table. A table
// of the source that the file does not list gets an entry of the
// defaults, with its columns and key from the source's catalog; so does a
// listed table that leaves its columns out. target.table in the defaults
// is a pattern of {schema} and {table}, "{table}" unless given; two tables
// whose targets would share a name are refused.
type Set struct {
	File     string
	defaults rawTable
	entries  []setEntry
	d        doc
}

// setEntry is one table of the file, as written.
type setEntry struct {
	raw  rawTable
	path []any // where it is in the file
}

// rawSet is the Set form of the file.
type rawSet struct {
	Defaults *rawTable   `yaml:"defaults" what:"defaults"`
	Tables   *[]rawTable `yaml:"tables" what:"a table"`
}

// The schema-change policies of a table (schema_changes).
const (
	// Follow: every change of the source's columns is followed, in the
	// target in place or by loading the table again (docs/cdc-sync.md,
	// schema changes); a change no mapping can follow holds the table.
	Follow = "follow"
	// AddColumns is Follow's earlier name, still read.
	AddColumns = "add_columns"
	// Refuse: any change of the source's columns holds the table at the
	// change, as the trigger flow refuses a column the mapping does not
	// know.
	Refuse = "refuse"
)

// LoadSet reads and checks the mapping file at path, in either form.
func LoadSet(path string) (*Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, outcome.Config.Mark(&MappingError{File: path, Msg: fmt.Sprintf("cannot read the mapping file: %v", err)})
	}
	return ParseSet(path, data)
}

// ParseSet checks a mapping file of either form; file names it in messages.
func ParseSet(file string, data []byte) (*Set, error) {
	s, err := parseSet(data)
	if err != nil {
		var me *MappingError
		if !errors.As(err, &me) {
			me = &MappingError{Msg: err.Error()}
		}
		me.File = file
		return nil, outcome.Config.Mark(me)
	}
	s.File = file
	return s, nil
}

func parseSet(data []byte) (*Set, error) {
	var probe yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&probe); err == nil && (hasKey(&probe, "tables") || hasKey(&probe, "defaults")) {
		var raw rawSet
		d, err := decodeDoc(data, &raw, "the mapping")
		if err != nil {
			return nil, err
		}
		s := &Set{d: d}
		if raw.Defaults != nil {
			s.defaults = *raw.Defaults
			if raw.Defaults.Key != nil || raw.Defaults.Columns != nil {
				return nil, d.at("defaults").errorf("defaults cannot hold key or columns: they belong to one table")
			}
		}
		// defaults alone: every table of the publication mapped from the
		// catalog under them (cdc sync).
		if raw.Tables != nil && len(*raw.Tables) == 0 {
			return nil, d.at("tables").errorf("tables must list at least one table (or leave tables out: defaults alone apply to every table)")
		}
		if raw.Tables == nil {
			return s, s.check()
		}
		for i, t := range *raw.Tables {
			s.entries = append(s.entries, setEntry{raw: t, path: []any{"tables", i}})
		}
		return s, s.check()
	}
	var raw rawTable
	d, err := decodeDoc(data, &raw, "the mapping")
	if err != nil {
		return nil, err
	}
	s := &Set{d: d, entries: []setEntry{{raw: raw}}}
	return s, s.check()
}

// hasKey reports whether the document n's top node is a mapping with key.
func hasKey(n *yaml.Node, key string) bool {
	if len(n.Content) == 0 {
		return false
	}
	top := resolveAlias(n.Content[0])
	if top.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i < len(top.Content); i += 2 {
		if top.Content[i].Value == key {
			return true
		}
	}
	return false
}

// check refuses, before any catalog is read, what no source can mend: an
// entry without a source table or listed twice, a bad policy, and the
// mistakes of the entries that are complete.
func (s *Set) check() error {
	if err := s.checkPolicy(s.defaults.SchemaChanges, []any{"defaults"}); err != nil {
		return err
	}
	seen := map[[2]string]bool{}
	for _, e := range s.entries {
		r := s.merged(e)
		if r.Source == nil || r.Source.Table == nil {
			return s.d.at(append(slices.Clone(e.path), "source")...).errorf("source.table is required")
		}
		k := [2]string{str(r.Source.Schema), *r.Source.Table}
		if seen[k] {
			return s.d.at(append(slices.Clone(e.path), "source", "table")...).errorf("table %s.%s is listed twice", k[0], k[1])
		}
		seen[k] = true
		if err := s.checkPolicy(e.raw.SchemaChanges, append(slices.Clone(e.path), "schema_changes")); err != nil {
			return err
		}
		if complete(r) {
			if _, err := compile(s.d, e.path, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// complete reports an entry that needs nothing from the source's catalog:
// target, key and columns given (else its columns are overrides).
func complete(r rawTable) bool {
	return r.Target != nil && r.Target.Table != nil && r.Key != nil && r.Columns != nil
}

func (s *Set) checkPolicy(p *string, path []any) error {
	if p != nil && *p != Follow && *p != AddColumns && *p != Refuse {
		return s.d.at(path...).errorf("schema_changes is %q: use %s or %s", *p, Follow, Refuse)
	}
	return nil
}

// Tables lists the source tables the file names, as schema.table.
func (s *Set) Tables() []string {
	var out []string
	for _, e := range s.entries {
		r := s.merged(e)
		out = append(out, str(r.Source.Schema)+"."+*r.Source.Table)
	}
	return out
}

// Cluster names the first target the file puts on a cluster
// (target.cluster): where is the table's schema.table, for an entry with
// its own target.cluster or an entry without a target under defaults that
// name one, or "defaults" for the tables the file does not list; cluster
// is "" when the file names none.
func (s *Set) Cluster() (where, cluster string) {
	d := s.defaultTarget()
	for _, e := range s.entries {
		r := s.merged(e)
		c := str(d.Cluster)
		if r.Target != nil {
			c = str(r.Target.Cluster)
		}
		if c != "" {
			return str(r.Source.Schema) + "." + str(r.Source.Table), c
		}
	}
	if c := str(d.Cluster); c != "" {
		return "defaults", c
	}
	return "", ""
}

// Single returns the file's one table, complete: the Mapping form, or a
// Set of one table with its columns (cdc apply and setup without a source).
func (s *Set) Single() (*Mapping, error) {
	if len(s.entries) != 1 {
		return nil, outcome.Config.Mark(&MappingError{File: s.File, Msg: fmt.Sprintf("the mapping lists %d tables; this command takes one", len(s.entries))})
	}
	m, err := compile(s.d, s.entries[0].path, s.merged(s.entries[0]))
	return s.located(m, err)
}

// For returns the Mapping of the source table schema.table of database db
// whose columns, mapped from its catalog (pgvalue.Generate), are cols and
// whose key is key: the file's entry (its columns override cols' of the
// same name, its key the catalog's; its source database, when it names
// none, is db), or the defaults' for a table the file does not list.
func (s *Set) For(db, schema, table string, cols []Column, key []string) (*Mapping, error) {
	return s.ForWithout(db, schema, table, cols, key, nil)
}

// ForWithout is For with the entry's columns in omit left out: columns
// the source table does not have now (it dropped them), which a target
// that stands keeps and the stream follows the drop of at its place.
func (s *Set) ForWithout(db, schema, table string, cols []Column, key []string, omit map[string]bool) (*Mapping, error) {
	return s.forTable(db, schema, table, cols, key, omit, true)
}

// ForTarget is For of a table whose target stands with the columns cols
// (its own, in its order, with the types it stores) and the sorting key
// key: the entry's target settings, and the columns as the target has
// them (the entry's columns, which the target may not follow yet, are
// not merged: cdc sync compares them apart).
func (s *Set) ForTarget(db, schema, table string, cols []Column, key []string) (*Mapping, error) {
	return s.forTable(db, schema, table, cols, key, nil, false)
}

// forTable is For, ForWithout and ForTarget: the entry's columns merged
// into cols when fromEntry.
func (s *Set) forTable(db, schema, table string, cols []Column, key []string, omit map[string]bool, fromEntry bool) (*Mapping, error) {
	e, listed := s.entry(schema, table)
	r := s.merged(e)
	if !listed {
		r.Source = mergeSource(&rawSource{Schema: &schema, Table: &table}, s.defaults.Source)
	}
	if r.Source.Database == nil {
		src := *r.Source
		src.Database = &db
		r.Source = &src
	}
	if r.Target == nil {
		d := s.defaultTarget()
		r.Target = &rawTarget{Database: d.Database, CreateDatabase: d.CreateDatabase, VersionColumn: d.VersionColumn, DeletedColumn: d.DeletedColumn,
			Cluster: d.Cluster}
	}
	if r.Target.Table == nil || !listed {
		name := targetName(str(s.defaultTarget().Table), schema, table)
		t := *r.Target
		t.Table = &name
		r.Target = &t
	}
	given, at := map[string]rawColumn{}, map[string]int{}
	if r.Columns != nil && fromEntry {
		for i, c := range *r.Columns {
			given[str(c.Name)], at[str(c.Name)] = c, i
		}
	}
	var merged []rawColumn
	for _, c := range cols {
		rc, ok := given[c.Name]
		if !ok {
			name, typ, src, maxLen := c.Name, c.Type, c.SourceType, c.MaxLength
			rc = rawColumn{Name: &name, Type: &typ}
			if src != "" {
				rc.SourceType = &src
			}
			if maxLen > 0 {
				rc.MaxLength = &maxLen
			}
		}
		delete(given, c.Name)
		merged = append(merged, rc)
	}
	for _, name := range slices.Sorted(maps.Keys(given)) {
		if omit[name] {
			continue
		}
		return s.located(nil, s.d.at(append(slices.Clone(e.path), "columns", at[name], "name")...).errorf(
			"column %q is not a column of %s.%s", name, schema, table))
	}
	r.Columns = &merged
	if !fromEntry {
		r.Key = nil
	}
	if r.Key == nil {
		if len(key) == 0 {
			return s.located(nil, s.noKey(e, listed, schema, table))
		}
		k := slices.Clone(key)
		r.Key = &k
	}
	m, err := compile(s.d, e.path, r)
	return s.located(m, err)
}

// noKey is the refusal of a table whose catalog gives no key (no primary
// key, no replica identity index: REPLICA IDENTITY FULL names every column,
// which is no key) and whose entry gives none: it points at the entry when
// the file lists the table, for the file has no line to fix otherwise.
func (s *Set) noKey(e setEntry, listed bool, schema, table string) error {
	where := "give the table an entry under tables with key: the columns that identify a row"
	p := pos{}
	if listed {
		where = "give its entry key: the columns that identify a row"
		p = s.d.at(e.path...)
	}
	return p.causef(ErrNoKey, "table %s.%s has no primary key to order its target by (REPLICA IDENTITY FULL names no key), so key is required: add a primary key, or %s",
		schema, table, where)
}

// Column returns the column name of the table schema.table as the file's
// entry writes it, when the entry names it: For puts it in place of the
// one the catalog's type maps to, and it maps a column the source adds
// later, or one of a type no mapping is generated for.
func (s *Set) Column(schema, table, name string) (Column, bool) {
	e, listed := s.entry(schema, table)
	if !listed || e.raw.Columns == nil {
		return Column{}, false
	}
	for _, c := range *e.raw.Columns {
		if str(c.Name) == name {
			out := Column{Name: name, Type: str(c.Type), SourceType: str(c.SourceType)}
			if c.MaxLength != nil {
				out.MaxLength = *c.MaxLength
			}
			return out, true
		}
	}
	return Column{}, false
}

// EntryColumns are the names of the columns the file's entry for the
// source table schema.table lists, in its order (none for a table it does
// not list).
func (s *Set) EntryColumns(schema, table string) []string {
	e, listed := s.entry(schema, table)
	if !listed || e.raw.Columns == nil {
		return nil
	}
	var out []string
	for _, c := range *e.raw.Columns {
		out = append(out, str(c.Name))
	}
	return out
}

// Policy is the schema-change policy of the source table schema.table.
// (Follow or Refuse; AddColumns reads as Follow).
func (s *Set) Policy(schema, table string) string {
	e, _ := s.entry(schema, table)
	p := orDefault(s.defaults.SchemaChanges, Follow)
	if e.raw.SchemaChanges != nil {
		p = *e.raw.SchemaChanges
	}
	if p == AddColumns {
		return Follow
	}
	return p
}

// entry is the file's entry of schema.table; listed is false (and the
// entry empty) when the file does not list it.
func (s *Set) entry(schema, table string) (setEntry, bool) {
	for _, e := range s.entries {
		r := s.merged(e)
		if str(r.Source.Schema) == schema && str(r.Source.Table) == table {
			return e, true
		}
	}
	return setEntry{path: []any{"defaults"}}, false
}

// merged is e with the defaults filled in where it leaves a key out (not
// the target's table: the defaults' is a pattern, For's business).
func (s *Set) merged(e setEntry) rawTable {
	r := e.raw
	r.Source = mergeSource(r.Source, s.defaults.Source)
	if r.Target != nil {
		d := s.defaultTarget()
		t := *r.Target
		for _, f := range []struct{ v, d **string }{{&t.Database, &d.Database}, {&t.VersionColumn, &d.VersionColumn}, {&t.DeletedColumn, &d.DeletedColumn},
			{&t.Cluster, &d.Cluster}} {
			if *f.v == nil {
				*f.v = *f.d
			}
		}
		if t.CreateDatabase == nil {
			t.CreateDatabase = d.CreateDatabase
		}
		r.Target = &t
	}
	return r
}

// targetNaming says what named a mapping's target, for the message of
// two targets that share a name.
type targetNaming struct {
	// pattern is the defaults' target.table pattern that named it
	// ("{table}" when the file sets none); "" when an entry's target.table
	// did.
	pattern string
	// key is the mapping file's key that names it: defaults.target.table,
	// or the entry's target.table; "" when unknown (CheckDistinct).
	key string
	// at is where the file writes that key (zero when it does not).
	at pos
}

// naming says what names the target of the source table schema.table, as
// For names it: its entry's target.table, or the defaults' pattern.
func (s *Set) naming(schema, table string) targetNaming {
	if e, listed := s.entry(schema, table); listed && e.raw.Target != nil && e.raw.Target.Table != nil {
		return targetNaming{key: "target.table of its entry", at: s.d.at(append(slices.Clone(e.path), "target", "table")...)}
	}
	pattern := s.defaultTarget().Table
	n := targetNaming{pattern: orDefault(pattern, "{table}"), key: "defaults.target.table"}
	if pattern != nil {
		n.at = s.d.at("defaults", "target", "table")
	}
	return n
}

// describe says what named a target: "the defaults' target.table pattern
// "{table}" (defaults.target.table, not set: the default)", or its entry's
// target.table and the line.
func (n targetNaming) describe() string {
	where := ""
	if n.at.line > 0 {
		where = fmt.Sprintf(", line %d", n.at.line)
	}
	if n.pattern == "" {
		return n.key + where
	}
	if n.at.line == 0 {
		where = ", not set: the default"
	}
	return fmt.Sprintf("the defaults' target.table pattern %q (%s%s)", n.pattern, n.key, where)
}

// CheckDistinct refuses mappings whose targets (or their live views,
// ledgers and locks) would share a name in one database: two source tables
// written into one target. It matches ErrTargetsShareName. Set.CheckDistinct
// says, besides, what named each target.
func CheckDistinct(ms []*Mapping) error {
	return checkDistinct(ms, func(*Mapping) targetNaming { return targetNaming{} })
}

// CheckDistinct is the package's CheckDistinct of mappings s made (For),
// whose message says what named each target: an entry's target.table and
// its line, or the defaults' target.table pattern, "{table}" unless the
// file sets it (which names a.items and b.items both items), with the key
// to change, defaults.target.table.
func (s *Set) CheckDistinct(ms []*Mapping) error {
	return checkDistinct(ms, func(m *Mapping) targetNaming { return s.naming(m.Source.Schema, m.Source.Table) })
}

func checkDistinct(ms []*Mapping, naming func(*Mapping) targetNaming) error {
	owner := map[string]*Mapping{}
	for _, m := range ms {
		for _, name := range []string{m.Target.Table, m.Target.LiveView, LedgerName(m), LockName(m)} {
			k := m.Target.Database + "." + name
			if o, dup := owner[k]; dup && o != m {
				return outcome.Config.Mark(sharedName(o, m, naming(o), naming(m), k))
			}
			owner[k] = m
		}
	}
	return nil
}

// sharedName is the refusal of a and b, named as na and nb, whose targets
// share the name k.
func sharedName(a, b *Mapping, na, nb targetNaming, k string) error {
	var named, fix string
	switch {
	case na.key == "" || nb.key == "": // unknown
		named = fmt.Sprintf("%s.%s and %s.%s share the name %s", a.Source.Schema, a.Source.Table, b.Source.Schema, b.Source.Table, k)
		fix = "give one of them another target.table, or, where the defaults name them (target.table pattern \"{table}\" unless " +
			"defaults.target.table sets it), set defaults.target.table to a pattern that tells them apart, as \"{schema}_{table}\""
	case na == nb:
		named = fmt.Sprintf("%s.%s and %s.%s share the name %s, both named by %s",
			a.Source.Schema, a.Source.Table, b.Source.Schema, b.Source.Table, k, na.describe())
	default:
		named = fmt.Sprintf("%s.%s (named by %s) and %s.%s (named by %s) share the name %s",
			a.Source.Schema, a.Source.Table, na.describe(), b.Source.Schema, b.Source.Table, nb.describe(), k)
	}
	if fix == "" {
		fix = "give one of them another target.table"
		if na.pattern != "" || nb.pattern != "" {
			fix = "set defaults.target.table to a pattern that tells them apart, as \"{schema}_{table}\", " +
				"or give one of them an entry under tables with its own target.table"
		}
	}
	e := &MappingError{File: b.File, Err: ErrTargetsShareName, Msg: "the targets of " + named + ": " + fix}
	for _, n := range []targetNaming{nb, na} {
		if n.at.line > 0 {
			e.Line, e.Column = n.at.line, n.at.col
			break
		}
	}
	return e
}

// DefaultDatabase makes db the targets' database where the mapping names
// none (the database of the ClickHouse URL, for cdc sync).
func (s *Set) DefaultDatabase(db string) {
	if db == "" {
		return
	}
	t := s.defaultTarget()
	if t.Database == nil {
		t.Database = &db
		s.defaults.Target = &t
	}
}

// defaultTarget is the defaults' target, never nil.
func (s *Set) defaultTarget() rawTarget {
	if s.defaults.Target == nil {
		return rawTarget{}
	}
	return *s.defaults.Target
}

// mergeSource fills what src leaves out from def.
func mergeSource(src, def *rawSource) *rawSource {
	if def == nil {
		return src
	}
	out := rawSource{}
	if src != nil {
		out = *src
	}
	for _, f := range []struct{ v, d **string }{{&out.Database, &def.Database}, {&out.Schema, &def.Schema},
		{&out.DeletedField, &def.DeletedField}, {&out.MetadataField, &def.MetadataField}} {
		if *f.v == nil {
			*f.v = *f.d
		}
	}
	return &out
}

// targetName fills the pattern ("" is "{table}") with schema and table.
func targetName(pattern, schema, table string) string {
	if pattern == "" {
		pattern = "{table}"
	}
	return strings.NewReplacer("{schema}", schema, "{table}", table).Replace(pattern)
}

// located marks a compile error with the file's name.
func (s *Set) located(m *Mapping, err error) (*Mapping, error) {
	if err != nil {
		var me *MappingError
		if !errors.As(err, &me) {
			me = &MappingError{Msg: err.Error()}
		}
		me.File = s.File
		return nil, outcome.Config.Mark(me)
	}
	m.File = s.File
	return m, nil
}

// Databases are the target databases the set's tables go to (the
// defaults' and every entry's), sorted, without repeats, but those setup
// makes itself (target.create_database: true).
func (s *Set) Databases() []string {
	var out []string
	add := func(t *rawTarget) {
		if t == nil || t.Database == nil || *t.Database == "" || (t.CreateDatabase != nil && *t.CreateDatabase) {
			return
		}
		if !slices.Contains(out, *t.Database) {
			out = append(out, *t.Database)
		}
	}
	d := s.defaultTarget()
	add(&d)
	for _, e := range s.entries {
		r := s.merged(e)
		if r.Target == nil {
			continue
		}
		add(r.Target)
	}
	slices.Sort(out)
	return out
}
