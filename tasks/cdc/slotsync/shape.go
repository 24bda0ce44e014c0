package slotsync

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/pgvalue"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// What the stream does not show of a table's changes (docs/cdc-sync.md,
// schema changes): pgoutput sends a table's definition (a Relation
// message: names, types, key flags in column order) before its first
// change of a session and again after any change of the table's catalog
// entry, never at the DDL itself, and never the values a DDL writes: a
// column added with a default (every older row reads it), a table
// rewritten by ALTER … TYPE … USING or by a volatile default. So each
// target records which source column each of its columns follows (by
// attribute number, which a rename keeps), and a fingerprint of the
// source table as it last checked it: its storage (pg_relation_filenode,
// which every rewrite changes) and each attribute's catalog row version
// (pg_attribute.xmin, which every ALTER of the column changes, and a
// VACUUM FULL or CLUSTER does not). A rewrite with no attribute changed is
// a VACUUM FULL or CLUSTER: harmless. A rewrite with one changed may have
// changed values the stream never carried: the table is loaded again.

// shape is what a target follows of its source table: its columns, in
// the target's order, each with the attribute number of the source column
// it follows (0: a column the source dropped, kept), and the fingerprint
// of the source table when it last matched it.
type shape struct {
	Cols []shapeCol `json:"cols"`
	// Filenode is the source table's storage; Attrs each live attribute's
	// catalog row version (pg_attribute.xmin), by attribute number.
	Filenode uint64            `json:"filenode"`
	Attrs    map[string]uint32 `json:"attrs"`
	// At is the commit LSN of the transaction at whose definition the
	// target last followed a change in place (0: none since its load).
	// A definition the stream shows at or before it, from another stream
	// than the one that followed, is older than the target (behindFollow).
	At uint64 `json:"at,omitempty"`
	// Generated are the attributes the target left out as generated
	// columns (pgoutput does not send them), kept once seen: one made
	// plain (DROP EXPRESSION) is no added column, its values are only in
	// the table (planAdd).
	Generated []int16 `json:"generated,omitempty"`
	// PubRel is the table's row of the publication when the target
	// followed it (sourceTable.pubrel; 0: not known, or none).
	PubRel uint32 `json:"pubrel,omitempty"`
	// Enums are the labels of each enum-typed attribute's type, by
	// attribute number: a label gone since (ALTER TYPE … RENAME VALUE)
	// changed values no change of the table carried (enumsChanged).
	Enums map[string][]string `json:"enums,omitempty"`
}

// shapeCol is one target column, the source attribute it follows and
// that attribute's type (OID and modifier) when the target took it.
type shapeCol struct {
	Name    string `json:"name"`
	Attnum  int16  `json:"attnum"`
	TypeOID uint32 `json:"type,omitempty"`
	TypeMod int32  `json:"mod,omitempty"`
}

// col is the shape's column name (ok false: none).
func (s *shape) col(name string) (shapeCol, bool) {
	for _, c := range s.Cols {
		if c.Name == name {
			return c, true
		}
	}
	return shapeCol{}, false
}

// followsType reports that the target took the source column c in with
// c's type, or that the shape does not say (a target of an earlier
// changesink).
func (s *shape) followsType(c pgvalue.Column) bool {
	sc, ok := s.col(c.Name)
	return !ok || sc.TypeOID == 0 || (sc.TypeOID == c.TypeOID && sc.TypeMod == c.TypeMod)
}

// shapeOf is the shape of a target made now for src by m (its columns by
// name), the source's fingerprint now.
func shapeOf(src sourceTable, m *mapping.Mapping, now tableNow) *shape {
	names := make([]string, len(m.Cols))
	for i := range m.Cols {
		names[i] = m.Cols[i].Name
	}
	return byName(src, names, now)
}

// adoptShape is the shape of a target an earlier changesink made and
// recorded none of, taken to follow the source's columns of its columns'
// names (a column renamed before this changesink ran is taken as dropped
// and added).
func adoptShape(src sourceTable, st target.Standing, now tableNow) *shape {
	names := make([]string, len(st.Cols))
	for i, c := range st.Cols {
		names[i] = c[0]
	}
	return byName(src, names, now)
}

// byName is a shape of the target columns names, each following the
// source column of its name, with the fingerprint of now.
func byName(src sourceTable, names []string, now tableNow) *shape {
	s := &shape{}
	for _, n := range names {
		c := shapeCol{Name: n}
		for i, sc := range src.cols {
			if sc.Name == n {
				c.Attnum, c.TypeOID, c.TypeMod = src.attnums[i], sc.TypeOID, sc.TypeMod
			}
		}
		s.Cols = append(s.Cols, c)
	}
	s.Filenode, s.Attrs = now.fingerprint()
	s.Generated, s.PubRel, s.Enums = now.generated(nil), src.pubrel, now.enums()
	return s
}

// enums are the labels of now's enum-typed attributes, by number.
func (n tableNow) enums() map[string][]string {
	var out map[string][]string
	for num, a := range n.Attrs {
		if !a.Dropped && len(a.Labels) > 0 {
			if out == nil {
				out = map[string][]string{}
			}
			out[strconv.Itoa(int(num))] = a.Labels
		}
	}
	return out
}

// enumsChanged says which enum-typed column of now lost a label the
// shape recorded ("": none); added labels are taken in.
func (s *shape) enumsChanged(now tableNow) (string, bool) {
	var why string
	changed := false
	for num, a := range now.Attrs {
		k := strconv.Itoa(int(num))
		was, ok := s.Enums[k]
		if a.Dropped || len(a.Labels) == 0 {
			continue
		}
		if !ok || !slices.Equal(was, a.Labels) {
			changed = true
		}
		for _, l := range was {
			if ok && !slices.Contains(a.Labels, l) && why == "" {
				why = fmt.Sprintf("the enum type of column %s no longer has the label %q (ALTER TYPE … RENAME VALUE): rows not changed since hold it", a.Name, l)
			}
		}
	}
	return why, changed
}

// generated is known with the attributes now has as generated columns
// added, in order.
func (n tableNow) generated(known []int16) []int16 {
	out := slices.Clone(known)
	for num, a := range n.Attrs {
		if a.Generated && !a.Dropped && !slices.Contains(out, num) {
			out = append(out, num)
		}
	}
	slices.Sort(out)
	return out
}

// attnum is the attribute the target column name follows (0: none).
func (s *shape) attnum(name string) int16 {
	for _, c := range s.Cols {
		if c.Name == name {
			return c.Attnum
		}
	}
	return 0
}

// column is the target column following attribute n ("": none).
func (s *shape) column(n int16) string {
	for _, c := range s.Cols {
		if c.Attnum == n && n != 0 {
			return c.Name
		}
	}
	return ""
}

// encode is the shape as a schema row of the load ledger records it.
func (s *shape) encode() string {
	b, err := json.Marshal(s)
	if err != nil {
		return "{}"
	}
	return string(b)
}

// decodeShape reads a schema row's shape; ok is false for one that does
// not parse (or none).
func decodeShape(detail string) (*shape, bool) {
	var s shape
	if detail == "" || json.Unmarshal([]byte(detail), &s) != nil || len(s.Cols) == 0 {
		return nil, false
	}
	return &s, true
}

// attr is one attribute of a source table as the catalog shows it now
// (dropped ones included).
type attr struct {
	Num       int16
	Name      string
	TypeOID   uint32
	TypeMod   int32
	Xmin      uint32
	Dropped   bool
	NotNull   bool
	HasDef    bool
	Generated bool
	// Missing is the value older rows read, for a column added with a
	// constant default (pg_attribute.attmissingval, as text under the
	// settings values are read with): "" and HasMissing false when none.
	HasMissing bool
	Missing    string
	// Labels are the labels of its type, an enum, in order (none: not an
	// enum).
	Labels []string
}

// tableNow is a source table's catalog entry now: its storage and its
// attributes by number.
type tableNow struct {
	Filenode uint64
	Attrs    map[int16]attr
}

// byName is the live attribute named name, if any.
func (n tableNow) byName(name string) (attr, bool) {
	for _, a := range n.Attrs {
		if !a.Dropped && a.Name == name {
			return a, true
		}
	}
	return attr{}, false
}

// fingerprint is n as a shape records it.
func (n tableNow) fingerprint() (uint64, map[string]uint32) {
	attrs := map[string]uint32{}
	for num, a := range n.Attrs {
		if !a.Dropped {
			attrs[strconv.Itoa(int(num))] = a.Xmin
		}
	}
	return n.Filenode, attrs
}

// nowSQL reads tables' storage and attributes. attmissingval is an
// anyarray of one element: its text is an array literal, read back as
// text[] for the element's own text (the type's output, under the
// connection's settings: pgvalue.Settings).
const nowSQL = `
SELECT c.oid::int8, COALESCE(pg_catalog.pg_relation_filenode(c.oid), 0)::int8, a.attnum, a.attname, a.atttypid::int8, a.atttypmod,
       a.xmin::text::int8, a.attisdropped, a.attnotnull, a.atthasdef, a.attgenerated <> '', a.atthasmissing,
       COALESCE(CASE WHEN a.atthasmissing THEN (a.attmissingval::text::text[])[1] END, ''),
       COALESCE((SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder) FROM pg_catalog.pg_enum e WHERE e.enumtypid = a.atttypid), '{}')
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
 WHERE c.oid = ANY ($1)`

// readNow reads the catalog entries of the tables oids now.
func readNow(ctx context.Context, conn *pgx.Conn, oids []uint32) (map[uint32]tableNow, error) {
	ids := make([]int64, len(oids))
	for i, o := range oids {
		ids[i] = int64(o)
	}
	rows, err := conn.Query(ctx, nowSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("read the catalog entries of the published tables: %w", err)
	}
	defer rows.Close()
	out := map[uint32]tableNow{}
	for rows.Next() {
		var oid, filenode, typeOID, xmin int64
		var a attr
		if err := rows.Scan(&oid, &filenode, &a.Num, &a.Name, &typeOID, &a.TypeMod, &xmin, &a.Dropped, &a.NotNull, &a.HasDef, &a.Generated,
			&a.HasMissing, &a.Missing, &a.Labels); err != nil {
			return nil, fmt.Errorf("read the catalog entries of the published tables: %w", err)
		}
		a.TypeOID, a.Xmin = uint32(typeOID), uint32(xmin)
		n, ok := out[uint32(oid)]
		if !ok {
			n = tableNow{Filenode: uint64(filenode), Attrs: map[int16]attr{}}
		}
		n.Attrs[a.Num] = a
		out[uint32(oid)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the catalog entries of the published tables: %w", err)
	}
	return out, nil
}

// rewrite is what a table's storage says since its shape's fingerprint.
type rewrite int

const (
	// notRewritten: the same storage: no value changed but through the
	// stream (a missing value aside, which an added column reads).
	notRewritten rewrite = iota
	// harmlessRewrite: new storage, no attribute changed (VACUUM FULL,
	// CLUSTER, SET TABLESPACE): the same values.
	harmlessRewrite
	// valuesRewritten: new storage and an attribute changed, dropped, or
	// added with values of its own (ALTER … TYPE, a volatile default):
	// values may have changed where the stream cannot see.
	valuesRewritten
)

// judgeRewrite compares the table now with the fingerprint s recorded,
// and says why when values may have been rewritten.
func judgeRewrite(s *shape, now tableNow) (rewrite, string) {
	if now.Filenode == s.Filenode {
		return notRewritten, ""
	}
	var changed []string
	for _, num := range slices.Sorted(maps.Keys(now.Attrs)) {
		a := now.Attrs[num]
		was, known := s.Attrs[strconv.Itoa(int(num))]
		switch {
		case known && a.Xmin != was:
			changed = append(changed, describeAttr(a))
		case !known && !a.Dropped && !a.Generated && (a.HasDef || a.NotNull) && !a.HasMissing:
			changed = append(changed, "added "+a.Name+" with a default")
		}
	}
	if len(changed) == 0 {
		return harmlessRewrite, ""
	}
	return valuesRewritten, "rewritten (ALTER TABLE changed " + strings.Join(changed, ", ") + ")"
}

// describeAttr names an attribute for judgeRewrite's message.
func describeAttr(a attr) string {
	if a.Dropped {
		return "a dropped column"
	}
	return a.Name
}
