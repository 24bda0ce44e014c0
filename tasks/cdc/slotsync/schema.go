package slotsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/merge"
	"github.com/changesink/changesink/tasks/cdc/pgvalue"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
	"github.com/jackc/pgx/v5/pgtype"
)

// A table's definition comes in the stream before its first change of a
// run and again after every change of its catalog entry (shape.go says
// what it cannot show). relation compares it with what the target follows
// (the table's shape) and the catalog now, and plans (planFollow): nothing,
// a change the target follows in place at this point of the stream (after
// the transactions before it are applied), a resync of the table from a
// new snapshot (at this point: resync.go), or, under schema_changes:
// refuse or for a change no mapping can follow, a hold (quarantine) of the
// table. docs/cdc-sync.md has the table of every DDL and what is done.

// relationAt says where a table's definition came in the stream: the
// transaction it opens, by its commit LSN and xid (pgoutput sends the
// Relation message itself with no WAL position of its own: 0/0).
func relationAt(ev *slot.Event) string {
	if ev.Tx.FinalLSN != 0 {
		return fmt.Sprintf("in the transaction committed at %s (xid %d)", ev.Tx.FinalLSN, ev.Tx.Xid)
	}
	return fmt.Sprintf("at %s", ev.WALStart)
}

// relation takes in a table's definition. Below the table's load point
// (its changes there are in the rows the load read) it only reads the
// columns, leniently. A held table, or one waiting for its resync, takes
// nothing.
func (r *syncRun) relation(ctx context.Context, ev *slot.Event) error {
	t := r.tables[ev.Relation.ID]
	if t == nil || !t.streams() {
		// A table not (or no longer) published: its changes say what is
		// done (r.table); one held or resyncing: skipped.
		return nil
	}
	if r.replay {
		// The targets hold the transaction, and follow this definition
		// already or a later one: it is compared with them at the
		// table's next change after the replay, if it is still in effect.
		t.untaken = ev.Relation
		return nil
	}
	if r.inLoad(t) {
		t.decodersBelow(ev.Relation)
		return nil
	}
	return r.takeIn(ctx, t, ev.Relation, ev.Tx.FinalLSN, relationAt(ev))
}

// takeIn compares the definition rel of t, which came at (where says
// so), with what its target follows and the catalog now (planFollow), and
// follows it in place, holds the table, or returns a *resyncAt.
func (r *syncRun) takeIn(ctx context.Context, t *syncTable, rel *slot.Relation, at slot.LSN, where string) error {
	t.untaken = nil
	now, err := readNow(ctx, r.conn, []uint32{t.src.oid})
	if err != nil {
		return sourceErr(err)
	}
	p, err := t.planFollow(rel, now[t.src.oid], r.cfg.Mappings, r.ch.Caps)
	if err != nil {
		return err
	}
	t.behindFollow(&p, at)
	switch {
	case p.hold != "":
		return r.holdTable(ctx, t, at, outcome.Refused.Mark(fmt.Errorf("table %s %s: %w: %s", t.name(), where, change.ErrSchemaChange, p.hold)))
	case p.resync != "":
		return &resyncAt{t: t, why: p.resync, at: at}
	case !p.empty():
		if err := r.follow(ctx, t, rel, now[t.src.oid], p, at); err != nil {
			var exact *resyncAt
			if errors.As(err, &exact) {
				exact.at = at
			}
			return err
		}
		r.followed = append(r.followed, fmt.Sprintf("%s: %s at %s", t.name(), p, at))
		r.log.Warn(fmt.Sprintf("cdc: table %s changed %s: %s; the target %s follows it", t.name(), where, p,
			mapping.Qualified(t.m.Target.Database, t.m.Target.Table)))
	}
	t.absorb(now[t.src.oid])
	if err := t.decoders(rel); err != nil {
		return err
	}
	t.src.cols = t.relColumns(rel)
	return r.recordShape(ctx, t)
}

// takeInCatalog takes in, at the end of a run that caught up, the
// definition every streaming table has in the catalog now, as the stream
// would show it before the table's next change: a change of columns with
// no change of rows after it (an added column, its default read by every
// row; a drop; a rename) reaches the target now, not at the table's next
// change. A definition from after the run caught up (a DDL meanwhile) is
// taken in early: the next run's stream then shows the older one, which a
// rename or a retype takes for a change it cannot tell and resyncs.
func (r *syncRun) takeInCatalog(ctx context.Context) error {
	src, err := readCatalog(ctx, r.conn, r.cfg.Publication)
	if err != nil {
		return sourceErr(err)
	}
	at := slot.LSN(0)
	if r.last != nil {
		at = slot.LSN(r.last.Through)
	}
	for _, s := range src {
		t := r.tables[s.oid]
		if t == nil || !t.streams() || t.shape == nil || uint64(at) < t.floor {
			continue
		}
		rel := &slot.Relation{ID: s.oid, Namespace: s.schema, Name: s.name, Identity: s.identity}
		for _, c := range s.cols {
			rel.Columns = append(rel.Columns, slot.Column{Name: c.Name, TypeOID: c.TypeOID, TypeMod: c.TypeMod, Key: c.Key && s.identity != slot.IdentityFull})
		}
		t.src.listed = s.listed
		if err := r.takeIn(ctx, t, rel, at, "in the catalog at the end of the run"); err != nil {
			return err
		}
		t.rel = nil // the stream's next definition of it is read anew
	}
	return nil
}

// follow is what a table's new definition changes in its target, in
// place (planFollow), or why it cannot be followed in place.
type follow struct {
	renames  [][2]string // from, to
	adds     []added
	drops    []string // target columns the source dropped: kept, NULL from now on
	nullable []string // of drops, those made Nullable
	widen    []string // columns given a wider ClickHouse type
	retyped  []string // columns of the same ClickHouse type, retyped at the source
	// resync says why the table must be loaded again; hold why it is held.
	resync, hold string
}

// added is a column the source added: how it is mapped, the attribute,
// and the text of the value the rows before it read (missing).
type added struct {
	col     mapping.Column
	src     pgvalue.Column
	attnum  int16
	missing *string
}

func (p follow) empty() bool {
	return len(p.renames)+len(p.adds)+len(p.drops)+len(p.widen)+len(p.retyped)+len(p.nullable) == 0
}

// String says what the plan changes, for messages.
func (p follow) String() string {
	var parts []string
	for _, rn := range p.renames {
		parts = append(parts, "renamed "+rn[0]+" to "+rn[1])
	}
	for _, a := range p.adds {
		s := "added " + a.col.Name
		if a.missing != nil {
			s += " (DEFAULT " + *a.missing + ")"
		}
		parts = append(parts, s)
	}
	if len(p.drops) > 0 {
		parts = append(parts, "dropped "+strings.Join(p.drops, ", ")+" (kept, NULL from now on)")
	}
	if len(p.widen) > 0 {
		parts = append(parts, "widened "+strings.Join(p.widen, ", "))
	}
	var lifted []string
	for _, n := range p.nullable {
		if !slices.Contains(p.drops, n) {
			lifted = append(lifted, n)
		}
	}
	if len(lifted) > 0 {
		parts = append(parts, "made "+strings.Join(lifted, ", ")+" Nullable (DROP NOT NULL)")
	}
	if len(p.retyped) > 0 {
		parts = append(parts, "retyped "+strings.Join(p.retyped, ", ")+" (the same ClickHouse type)")
	}
	return strings.Join(parts, "; ")
}

// planFollow compares the definition rel with what t's target follows
// (its shape and mapping) and the table's catalog entry now. What the
// target cannot follow exactly in place is a resync: values rewritten
// where the stream cannot see (judgeRewrite), a new key, a retype that
// changes values' text or the ClickHouse type, a rename on a server
// without RENAME COLUMN, a column it cannot tell from a rename, a column
// added to a publication's column list. Under schema_changes: refuse, any
// change is a hold; so is one no mapping can follow (an added column of a
// type none is generated for, a retype the entry's type cannot hold).
func (t *syncTable) planFollow(rel *slot.Relation, now tableNow, set *mapping.Set, caps mapping.ServerCaps) (follow, error) {
	var p follow
	for _, c := range rel.Columns {
		if j, ok := t.m.ByName[c.Name]; ok && t.entryCannotHold(&p, c, &t.m.Cols[j], set) {
			return t.underPolicy(p), nil
		}
	}
	if rw, why := judgeRewrite(t.shape, now); rw == valuesRewritten && !t.behind(rel, now) {
		p.resync = why
		return t.underPolicy(p), nil
	}
	inRel := map[string]slot.Column{}
	for _, c := range rel.Columns {
		inRel[c.Name] = c
	}
	missing := map[string]bool{}
	for _, c := range t.m.Cols {
		if sc, ok := t.shape.col(c.Name); ok && sc.Attnum == 0 && c.Type.Nullable {
			continue // dropped before and followed: kept, Nullable
		}
		if _, ok := inRel[c.Name]; !ok {
			missing[c.Name] = true
		}
	}
	if rel.Identity != slot.IdentityFull {
		var keys []string
		for _, c := range rel.Columns {
			if c.Key {
				keys = append(keys, c.Name)
			}
		}
		if want := keyNames(t.m); !sameSet(keys, want) {
			p.resync = fmt.Sprintf("the key is now (%s), the target's is (%s)", strings.Join(keys, ", "), strings.Join(want, ", "))
			return t.underPolicy(p), nil
		}
	}
	for _, c := range rel.Columns {
		if j, ok := t.m.ByName[c.Name]; ok {
			if sc, ok := t.shape.col(c.Name); ok {
				if a, found := now.byName(c.Name); found && a.Num != sc.Attnum {
					// Names swapped, or a column dropped and another
					// added under its name: the target's values are
					// another column's.
					p.resync = fmt.Sprintf("column %s is attribute %d now, the target's follows attribute %d: its name went to another column",
						c.Name, a.Num, sc.Attnum)
					return t.underPolicy(p), nil
				}
			}
			if mc := &t.m.Cols[j]; !mc.Type.Nullable && !mc.IsKey {
				if a, found := now.byName(c.Name); found && !a.NotNull {
					p.nullable = append(p.nullable, c.Name) // DROP NOT NULL
				}
			}
			t.planRetype(&p, c, &t.m.Cols[j], set, caps)
			continue
		}
		a, found := now.byName(c.Name)
		switch {
		case !found:
			p.resync = fmt.Sprintf("column %s is not in the catalog now (renamed or dropped again since): its values cannot be told", c.Name)
		case t.shape.column(a.Num) != "" && missing[t.shape.column(a.Num)]:
			from := t.shape.column(a.Num)
			if sc, _ := t.shape.col(from); sc.TypeOID != 0 && (sc.TypeOID != c.TypeOID || sc.TypeMod != c.TypeMod) {
				p.resync = fmt.Sprintf("column %s was renamed to %s and retyped", from, c.Name)
			} else if !caps.RenameColumn {
				p.resync = fmt.Sprintf("column %s was renamed to %s, and ClickHouse before 20.4 cannot rename a column", from, c.Name)
			}
			p.renames = append(p.renames, [2]string{from, c.Name})
			delete(missing, from)
		case t.src.listed:
			p.resync = fmt.Sprintf("column %s joined the publication's column list: its older values never came in the stream", c.Name)
		default:
			t.planAdd(&p, c, a, now, set, caps)
		}
	}
	for _, c := range t.m.Cols {
		if !missing[c.Name] {
			continue
		}
		if a, found := now.byName(c.Name); found && !a.Generated {
			// Not dropped: the table has it, the definition does not.
			if t.src.listed {
				p.hold = fmt.Sprintf("column %s left the publication's column list: its changes are no longer in the stream; "+
					"put it back or map the table without it, then resync", c.Name)
				return t.underPolicy(p), nil
			}
			p.resync = fmt.Sprintf("column %s is in the table but not in this definition of it (an older one): its values cannot be told", c.Name)
			return t.underPolicy(p), nil
		}
		p.drops = append(p.drops, c.Name)
		switch {
		case c.IsKey:
			p.resync = fmt.Sprintf("key column %s was dropped", c.Name)
		case !c.Type.Nullable:
			p.nullable = append(p.nullable, c.Name)
		}
	}
	return t.underPolicy(p), nil
}

// behind reports that the definition rel is older than the table's
// catalog entry now: a column of one is not the other's, by name and
// type. The DDL between them is then ahead in the stream, which shows a
// new definition at the first change after its commit (pgoutput sends
// one after every invalidation of the table), so a rewrite the catalog
// shows is judged there, not at rel: the transactions before it are
// applied exactly, not loaded again (or, when the load is refused, left
// out of a held table). A rewrite with no change of columns (a USING of
// the same type) shows no newer definition: it is judged at once.
func (t *syncTable) behind(rel *slot.Relation, now tableNow) bool {
	live := 0
	for _, a := range now.Attrs {
		if !a.Dropped && !a.Generated {
			live++
		}
	}
	for _, c := range rel.Columns {
		a, ok := now.byName(c.Name)
		if !ok || a.TypeOID != c.TypeOID || a.TypeMod != c.TypeMod {
			return true
		}
	}
	return !t.src.listed && len(rel.Columns) != live
}

// behindFollow makes a change p would make a resync when the definition
// came in a transaction at or before the one at whose definition the
// target last followed a change (shape.At), in another stream than the
// one that followed it: a run that followed a change and stopped before
// it applied that transaction (killed, failed, or restarted for another
// table's resync) gets the transaction again, with the definition from
// before the change first. Taken in, it would undo the change (a column
// the target added read as dropped, the transaction's rows before the DDL
// read without the value the follow gave them); the table is loaded again
// instead.
func (t *syncTable) behindFollow(p *follow, at slot.LSN) {
	if p.empty() || p.resync != "" || p.hold != "" || t.shape == nil || t.shape.At == 0 || t.followedHere || uint64(at) > t.shape.At {
		return
	}
	p.resync = fmt.Sprintf("the stream shows its definition from before the change the target followed at %s, which taking it in "+
		"would undo (%s): the stream restarted, or a run stopped, between the follow and the transaction's apply", slot.LSN(t.shape.At), p)
}

// typeName names a type OID for a message: its name when it is one of
// PostgreSQL's built-in types (pgx's registry), else "type OID n".
func typeName(oid uint32) string {
	if t, ok := pgtype.NewMap().TypeForOID(oid); ok {
		return t.Name
	}
	return fmt.Sprintf("type OID %d", oid)
}

// underPolicy is p under the table's schema_changes: refuse holds the
// table at any change.
func (t *syncTable) underPolicy(p follow) follow {
	if t.policy == mapping.Refuse && (p.resync != "" || !p.empty()) {
		why := p.resync
		if why == "" {
			why = p.String()
		}
		return follow{hold: why + " (schema_changes: refuse)"}
	}
	return p
}

// planRetype plans a column of the target whose source type in rel may
// differ from the one the target took (its shape). Without a rewrite the
// stored values are the same: a retype whose values print the same (among
// varchar and text, numeric of the same scale) is followed in place, with
// the ClickHouse type the new one maps to when it is the target's or a
// wider Decimal; any other needs the table loaded again.
func (t *syncTable) planRetype(p *follow, c slot.Column, mc *mapping.Col, set *mapping.Set, caps mapping.ServerCaps) {
	sc, ok := t.shape.col(c.Name)
	if !ok || sc.TypeOID == 0 || (sc.TypeOID == c.TypeOID && sc.TypeMod == c.TypeMod) {
		return
	}
	src := t.relColumn(c)
	nc, err := columnFor(set, t.src, src, caps)
	if err != nil {
		p.hold = fmt.Sprintf("column %s is now %s: %v", c.Name, src.TypeName, err)
		return
	}
	typ, perr := mapping.ParseType(nc.Type)
	switch {
	case !pgvalue.SameText(sc.TypeOID, c.TypeOID):
		p.resync = fmt.Sprintf("column %s was retyped (%s to %s): its values' text may differ", c.Name, typeName(sc.TypeOID), typeName(c.TypeOID))
	case perr == nil && typ.SameType(mc.Type.DDL(caps)):
		p.retyped = append(p.retyped, c.Name)
	case perr == nil && !mc.IsKey && mapping.Widens(mc.Type, typ):
		p.widen = append(p.widen, c.Name)
	default:
		p.resync = fmt.Sprintf("column %s was retyped from %s to %s", c.Name, mc.Type.DDL(caps), nc.Type)
	}
}

// entryCannotHold holds the table (p.hold) when the source retyped column
// c, which the mapping entry names, to a type the entry's type mc cannot
// read: no load nor stream could fill it.
func (t *syncTable) entryCannotHold(p *follow, c slot.Column, mc *mapping.Col, set *mapping.Set) bool {
	sc, ok := t.shape.col(c.Name)
	if !ok || sc.TypeOID == 0 || (sc.TypeOID == c.TypeOID && sc.TypeMod == c.TypeMod) {
		return false
	}
	if _, named := set.Column(t.src.schema, t.src.name, c.Name); !named {
		return false
	}
	src := t.relColumn(c)
	if _, err := pgvalue.NewDecoder(src, mc); err != nil {
		typ := src.TypeName
		if typ == "" {
			typ = typeName(c.TypeOID)
		}
		p.hold = fmt.Sprintf("column %s was retyped to %s, which the mapping entry's %s cannot hold: %v", c.Name, typ, mc.Type, err)
		return true
	}
	return false
}

// planAdd plans a column the source added (a its attribute now): mapped
// as the next run's mapping will map it, Nullable (the rows before it
// have none of their own): with the value they read when it was added
// with a constant default (its missing value), NULL otherwise. An entry's
// column must be Nullable.
func (t *syncTable) planAdd(p *follow, c slot.Column, a attr, now tableNow, set *mapping.Set, caps mapping.ServerCaps) {
	if t.reusedSince(a, now) {
		p.resync = fmt.Sprintf("column %s: a column added and dropped since the target's record came before it, and the stream's "+
			"%s may be that one", c.Name, c.Name)
		return
	}
	if slices.Contains(t.shape.Generated, a.Num) {
		p.resync = fmt.Sprintf("column %s was a generated column, left out of the target, and is a plain one now (DROP EXPRESSION): "+
			"its values are only in the table", c.Name)
		return
	}
	src := t.relColumn(c)
	src.NotNull, src.Key = false, false
	mc, err := columnFor(set, t.src, src, caps)
	if err != nil {
		p.hold = fmt.Sprintf("added column %s: %v", c.Name, err)
		return
	}
	if _, named := set.Column(t.src.schema, t.src.name, c.Name); named && !strings.HasPrefix(mc.Type, "Nullable(") {
		p.hold = fmt.Sprintf("added column %s: the mapping maps it as %s, and an added column is Nullable (the rows before it have none): "+
			"map it as Nullable(%s)", c.Name, mc.Type, mc.Type)
		return
	}
	ad := added{col: mc, src: src, attnum: a.Num}
	if a.HasMissing {
		v := a.Missing
		ad.missing = &v
	}
	p.adds = append(p.adds, ad)
}

// reusedSince reports that the catalog now has, before attribute a, an
// attribute added after every one the target follows and dropped since:
// the name a has now may have been that one's when the stream's
// definition was written (added, dropped, added again), and the catalog
// cannot tell which. (A column added and dropped that the target
// followed counts too: one resync more, never a wrong value.)
func (t *syncTable) reusedSince(a attr, now tableNow) bool {
	// The attributes the target follows (its record's fingerprint may be
	// the catalog's, ahead of the stream: absorb).
	known := slices.Max(append(slices.Clone(t.shape.Generated), 0))
	for _, c := range t.shape.Cols {
		known = max(known, c.Attnum)
	}
	for num, x := range now.Attrs {
		if x.Dropped && num > known && num < a.Num {
			return true
		}
	}
	return false
}

// relColumn is rel's column c as pgvalue reads it (sourceColumn).
func (t *syncTable) relColumn(c slot.Column) pgvalue.Column { return t.sourceColumn(c) }

// relColumns are rel's columns as pgvalue reads them: the table's columns
// from now on (a load reads these).
func (t *syncTable) relColumns(rel *slot.Relation) []pgvalue.Column {
	out := make([]pgvalue.Column, len(rel.Columns))
	for i, c := range rel.Columns {
		out[i] = t.sourceColumn(c)
	}
	return out
}

// follow changes t's target in place as p says, at the definition rel:
// the transactions before it applied first (their rows have the old
// columns), then the columns renamed, made Nullable or wider, added (with
// the value the rows before them read); the live view made again; the
// rows of the transaction being read carried over by name; the new shape
// recorded. A default the server reads back as another value is a
// resync instead (*resyncAt).
func (r *syncRun) follow(ctx context.Context, t *syncTable, rel *slot.Relation, now tableNow, p follow, at slot.LSN) error {
	if err := r.applyFlush(ctx); err != nil {
		return err
	}
	old := t.m
	srv := t.srv
	var err error
	for _, rn := range p.renames {
		if err := srv.RenameColumn(ctx, rn[0], rn[1]); err != nil {
			return tableErr(t, err)
		}
	}
	m, err := r.cfg.Mappings.ForTarget(r.source, t.src.schema, t.src.name, t.followedColumns(rel, p, r.ch.Caps), keyNames(old))
	if err != nil {
		return outcome.Config.Mark(err)
	}
	defaults, err := t.olderValues(m, p)
	if err != nil {
		return err
	}
	srv = r.ch.With(m)
	if len(p.nullable)+len(p.widen) > 0 {
		if err := srv.ModifyColumns(ctx, append(slices.Clone(p.nullable), p.widen...)); err != nil {
			return tableErr(t, err)
		}
	}
	tbl, err := srv.AddColumns(ctx, defaults)
	if errors.Is(err, target.ErrDefaultNotExact) {
		return &resyncAt{t: t, why: err.Error()}
	}
	if err != nil {
		return tableErr(t, err)
	}
	renamed := map[string]string{}
	for _, rn := range p.renames {
		renamed[rn[1]] = rn[0]
	}
	for i := range t.open {
		t.open[i].Vals = carry(old, m, t.open[i].Vals, renamed, defaults)
	}
	t.m, t.srv, t.batch = m, srv, merge.NewBatch(m)
	t.run.M, t.run.Tbl = m, tbl
	t.shape = t.followedShape(p, rel)
	t.shape.At, t.followedHere = uint64(at), true
	t.absorb(now)
	t.record = true
	return r.recordShape(ctx, t)
}

// followedColumns are the target's columns after p, in its order (adds
// last), with their types.
func (t *syncTable) followedColumns(rel *slot.Relation, p follow, caps mapping.ServerCaps) []mapping.Column {
	renamed := map[string]string{}
	for _, rn := range p.renames {
		renamed[rn[0]] = rn[1]
	}
	var cols []mapping.Column
	for i := range t.m.Cols {
		c := &t.m.Cols[i]
		name := c.Name
		if n, ok := renamed[name]; ok {
			name = n
		}
		typ := c.Type
		if slices.Contains(p.nullable, c.Name) {
			typ.Nullable = true
		}
		mc := mapping.Column{Name: name, Type: typ.String(), MaxLength: c.MaxLen}
		if rc := rel.Column(name); rc >= 0 && (slices.Contains(p.retyped, c.Name) || slices.Contains(p.widen, c.Name)) {
			if nc, err := pgvalue.Generate(t.name(), t.relColumn(rel.Columns[rc]), caps); err == nil {
				mc.MaxLength, mc.SourceType = nc.MaxLength, nc.SourceType
				if slices.Contains(p.widen, c.Name) {
					mc.Type = nc.Type
				}
			}
		}
		cols = append(cols, mc)
	}
	for _, a := range p.adds {
		cols = append(cols, a.col)
	}
	return cols
}

// olderValues decodes, for each column p adds with a constant default,
// the value the rows older than it read (the missing value's text), as m
// maps the column.
func (t *syncTable) olderValues(m *mapping.Mapping, p follow) (map[string]change.Value, error) {
	out := map[string]change.Value{}
	for _, a := range p.adds {
		if a.missing == nil {
			continue
		}
		d, err := pgvalue.NewDecoder(a.src, &m.Cols[m.ByName[a.col.Name]])
		if err != nil {
			return nil, outcome.Config.Mark(fmt.Errorf("table %s: %w", t.name(), err))
		}
		v, err := d.Value('t', []byte(*a.missing))
		if err != nil {
			return nil, outcome.Refused.Mark(fmt.Errorf("table %s: column %s's value %q in its older rows: %w", t.name(), a.col.Name, *a.missing, err))
		}
		out[a.col.Name] = v
	}
	return out, nil
}

// followedShape is t's shape after p: renamed columns follow the same
// attribute under their new names, dropped ones none, added ones theirs;
// types are rel's.
func (t *syncTable) followedShape(p follow, rel *slot.Relation) *shape {
	s := &shape{Filenode: t.shape.Filenode, Attrs: t.shape.Attrs, Generated: t.shape.Generated, PubRel: t.shape.PubRel,
		Enums: t.shape.Enums}
	renamed := map[string]string{}
	for _, rn := range p.renames {
		renamed[rn[0]] = rn[1]
	}
	for _, c := range t.shape.Cols {
		if n, ok := renamed[c.Name]; ok {
			c.Name = n
		}
		if slices.Contains(p.drops, c.Name) {
			c.Attnum = 0
		}
		if i := rel.Column(c.Name); i >= 0 {
			c.TypeOID, c.TypeMod = rel.Columns[i].TypeOID, rel.Columns[i].TypeMod
		}
		s.Cols = append(s.Cols, c)
	}
	for _, a := range p.adds {
		sc := shapeCol{Name: a.col.Name, Attnum: a.attnum, TypeOID: a.src.TypeOID, TypeMod: a.src.TypeMod}
		s.Cols = append(s.Cols, sc)
	}
	return s
}

// carry moves the values of a row read under mapping old to mapping m by
// column name (renamed: new name to old); a column old lacks gets the
// value the rows before it read (defaults), else NULL.
func carry(old, m *mapping.Mapping, vals []change.Value, renamed map[string]string, defaults map[string]change.Value) []change.Value {
	out := make([]change.Value, len(m.Cols))
	for i := range m.Cols {
		name := m.Cols[i].Name
		if o, ok := renamed[name]; ok {
			name = o
		}
		if j, ok := old.ByName[name]; ok && j < len(vals) {
			out[i] = vals[j]
			continue
		}
		if v, ok := defaults[m.Cols[i].Name]; ok {
			out[i] = v
			continue
		}
		out[i] = change.Value{Null: true}
	}
	return out
}

// absorb takes the catalog entry now as the table's fingerprint when it
// was not rewritten since, or rewritten harmlessly (a VACUUM FULL): no
// value changed where the stream cannot see, so what changed of the
// attributes (a rename, SET DEFAULT) is the stream's to show. A rewrite
// that changed values is not absorbed: it is resynced.
func (t *syncTable) absorb(now tableNow) {
	if rw, _ := judgeRewrite(t.shape, now); rw == valuesRewritten {
		return
	}
	f, a := now.fingerprint()
	g := now.generated(t.shape.Generated)
	if f != t.shape.Filenode || !sameAttrs(a, t.shape.Attrs) || !slices.Equal(g, t.shape.Generated) {
		t.shape.Filenode, t.shape.Attrs, t.shape.Generated = f, a, g
		t.record = true
	}
}

// sameAttrs reports equal fingerprints of attributes.
func sameAttrs(a, b map[string]uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// sameSet reports whether a and b hold the same names, in any order.
func sameSet(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(s string) bool { return !slices.Contains(b, s) })
}
