package slot

// SchemaChange is what a Relation message changes in the relation of the
// same ID that the stream reported before it (in this session, or in
// StreamConfig.Relations). pgoutput sends a table's Relation again after
// any change to its definition, and once per session, so most carry no
// change.
//
// Columns are matched by name: pgoutput does not send attribute numbers, so
// a renamed column is a dropped one and an added one (RenamedCandidates
// names the pairs at the same position with the same type, which a rename
// would give but a drop and an add can also).
type SchemaChange struct {
	// Prev is the relation replaced; nil when this is the first Relation
	// of its ID the stream has seen (no change is reported then).
	Prev *Relation
	// Added: columns Prev does not have. Dropped: columns of Prev it does
	// not have.
	Added   []Column
	Dropped []Column
	// Retyped: columns whose type or type modifier changed.
	Retyped []Retype
	// KeyChanged: the set of Key columns differs (by name).
	KeyChanged bool
	// IdentityChanged: the replica identity setting differs.
	IdentityChanged bool
	// Renamed: the table's schema or name differs.
	Renamed bool
	// Reordered: the common columns are in another order.
	Reordered bool
	// RenamedCandidates: a dropped and an added column at the same
	// position with the same type: maybe a RENAME COLUMN.
	RenamedCandidates []Rename
}

// Retype is one column whose type changed.
type Retype struct {
	Name     string
	From, To Column
}

// Rename is a possible column rename.
type Rename struct {
	From, To string
}

// Changed reports whether the relation differs from the one it replaces
// (false for the first Relation of an ID).
func (c *SchemaChange) Changed() bool {
	return c.Prev != nil && (len(c.Added) > 0 || len(c.Dropped) > 0 || len(c.Retyped) > 0 || c.KeyChanged ||
		c.IdentityChanged || c.Renamed || c.Reordered)
}

// diffRelation compares next with prev (nil: nothing to compare).
func diffRelation(prev, next *Relation) SchemaChange {
	c := SchemaChange{Prev: prev}
	if prev == nil {
		return c
	}
	c.Renamed = prev.Namespace != next.Namespace || prev.Name != next.Name
	c.IdentityChanged = prev.Identity != next.Identity
	var common []string
	for _, col := range next.Columns {
		i := prev.Column(col.Name)
		if i < 0 {
			c.Added = append(c.Added, col)
			continue
		}
		old := prev.Columns[i]
		if old.TypeOID != col.TypeOID || old.TypeMod != col.TypeMod {
			c.Retyped = append(c.Retyped, Retype{Name: col.Name, From: old, To: col})
		}
		if old.Key != col.Key {
			c.KeyChanged = true
		}
		common = append(common, col.Name)
	}
	k := 0
	for _, col := range prev.Columns {
		if next.Column(col.Name) < 0 {
			c.Dropped = append(c.Dropped, col)
			if col.Key {
				c.KeyChanged = true
			}
			continue
		}
		if common[k] != col.Name {
			c.Reordered = true
		}
		k++
	}
	for _, a := range c.Added {
		if a.Key {
			c.KeyChanged = true
		}
		for _, d := range c.Dropped {
			if next.Column(a.Name) == prev.Column(d.Name) && a.TypeOID == d.TypeOID && a.TypeMod == d.TypeMod {
				c.RenamedCandidates = append(c.RenamedCandidates, Rename{From: d.Name, To: a.Name})
			}
		}
	}
	return c
}

// newRelation builds a Relation from a decoded Relation message (copying
// the strings out of the receive buffer).
func newRelation(m *message) *Relation {
	r := &Relation{
		ID:        m.relID,
		Namespace: string(m.namespace),
		Name:      string(m.name),
		Identity:  m.identity,
		Columns:   make([]Column, len(m.columns)),
	}
	for i, c := range m.columns {
		r.Columns[i] = Column{Name: string(c.name), TypeOID: c.typeOID, TypeMod: c.typeMod, Key: c.flags&1 != 0}
	}
	return r
}
