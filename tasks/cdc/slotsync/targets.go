package slotsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/applier"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/merge"
	"github.com/changesink/changesink/tasks/cdc/pgvalue"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// syncTable is one published table and its target in a sync run.
type syncTable struct {
	src    sourceTable
	m      *mapping.Mapping
	policy string // schema_changes
	srv    *target.Server
	run    *applier.Table
	batch  *merge.Batch
	res    applier.Counts
	// rel is the relation in effect (the stream's Relation event), and
	// cols its columns' decoders: decs[i] reads relation column i into
	// mapped column at[i] (at[i] < 0: the column is not mapped).
	rel  *slot.Relation
	decs []*pgvalue.Decoder
	at   []int
	// untaken is a definition that came in a replayed transaction and was
	// not compared with the target then: it is at the table's next change
	// after the replay (takeInAfterReplay).
	untaken *slot.Relation
	// followedHere: the stream being read made the target follow a
	// change (follow), at shape.At; a new stream clears it.
	followedHere bool
	// keyless: rel came below the load point, and its key columns cannot
	// be read into the mapping (decodersBelow).
	keyless bool
	// open holds the rows of the transaction being read; rows counts the
	// rows of the flush being gathered.
	open []change.Row
	rows int64
	// hadRows: the target held rows when the load began (refuseNewer); a
	// target that held none has no key for deleteGone to delete.
	hadRows bool
	// floor is the point its load versioned its rows at (readFloors).
	floor uint64
	// shape is what the target follows of its source table (shape.go);
	// record: it changed, and the load ledger does not hold it yet.
	shape  *shape
	record bool
	// resync says why the table waits to be loaded again ("": it does
	// not): its changes are not applied until then (resync.go).
	resync string
	// hold is the load ledger's hold row of a held table (Gen "": not
	// held): its changes are skipped until an operator's resync; holdErr
	// the refusal that held it in this run.
	hold    target.LoadRow
	holdErr error
	// created: cdc setup made its target now.
	created bool
}

func (t *syncTable) name() string { return t.src.qualified() }

// streams reports that the run applies t's changes: it is neither held
// nor waiting for a resync.
func (t *syncTable) streams() bool { return t.resync == "" && t.hold.Gen == "" }

// mappings maps every published table to its target as a new target
// would be made for it: the mapping file's entry, or one from the source's
// catalog (pgvalue.Generate), checked to be distinct.
func mappings(set *mapping.Set, db string, tables []sourceTable, caps mapping.ServerCaps) ([]*mapping.Mapping, error) {
	var out []*mapping.Mapping
	for _, t := range tables {
		m, err := mapTable(set, db, t, caps)
		if errors.Is(err, pgvalue.ErrUnsupportedType) {
			// A column of a type no mapping is generated for: a new
			// target refuses it (strictMapping); one that stands is
			// mapped as it stands, and the stream holds the table at the
			// column's definition (planAdd), the other tables going on.
			if without, werr := mapTable(set, db, withoutUnmapped(set, t, caps), caps); werr == nil {
				m, err = without, nil
			}
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if err := set.CheckDistinct(out); err != nil {
		return nil, outcome.Config.Mark(err)
	}
	return out, nil
}

// withoutUnmapped is t without its columns of a type no mapping is
// generated for (and no entry names).
func withoutUnmapped(set *mapping.Set, t sourceTable, caps mapping.ServerCaps) sourceTable {
	out := t
	out.cols, out.attnums = nil, nil
	for i, c := range t.cols {
		if _, err := columnFor(set, t, c, caps); errors.Is(err, pgvalue.ErrUnsupportedType) {
			continue
		}
		out.cols, out.attnums = append(out.cols, c), append(out.attnums, t.attnums[i])
	}
	return out
}

// columnFor maps the source column c of table t: the entry's column, when
// it names one (it takes the generated one's place: Set.For), else the
// one generated from its type (a type none is generated for needs one).
func columnFor(set *mapping.Set, t sourceTable, c pgvalue.Column, caps mapping.ServerCaps) (mapping.Column, error) {
	if mc, ok := set.Column(t.schema, t.name, c.Name); ok {
		return mc, nil
	}
	mc, err := pgvalue.Generate(t.qualified(), c, caps)
	if err != nil {
		return mapping.Column{}, outcome.Config.Mark(err)
	}
	return mc, nil
}

// mapTable maps the source table t as a new target is made for it: its
// columns (its generated ones left out: pgoutput does not send them) in
// its order, its key. Columns the mapping entry names that t no longer
// has (gone: the source dropped them) are left out; a new target refuses
// them (strictMapping), one that stands keeps them (the stream follows
// the drop at its place).
func mapTable(set *mapping.Set, db string, t sourceTable, caps mapping.ServerCaps) (*mapping.Mapping, error) {
	return mapTableWithout(set, db, t, caps, goneColumns(set, t))
}

// goneColumns are the columns t's mapping entry names that t does not
// have.
func goneColumns(set *mapping.Set, t sourceTable) []string {
	var gone []string
	for _, name := range set.EntryColumns(t.schema, t.name) {
		if !slices.ContainsFunc(t.cols, func(c pgvalue.Column) bool { return c.Name == name }) && !slices.Contains(t.generated, name) {
			gone = append(gone, name)
		}
	}
	return gone
}

// strictMapping is t's mapping for a new target: an entry's column t
// does not have is refused, at its line of the file.
func strictMapping(set *mapping.Set, db string, t sourceTable, caps mapping.ServerCaps) error {
	_, err := mapTableWithout(set, db, t, caps, nil)
	return err
}

// mapTableWithout is mapTable with the entry's columns in omit left out.
func mapTableWithout(set *mapping.Set, db string, t sourceTable, caps mapping.ServerCaps, omit []string) (*mapping.Mapping, error) {
	var cols []mapping.Column
	var key []string
	for _, g := range t.generated {
		if _, named := set.Column(t.schema, t.name, g); named {
			return nil, outcome.Config.Mark(&pgvalue.ColumnError{Table: t.qualified(), Column: g, Err: fmt.Errorf(
				"%w: pgoutput does not send its values, and the mapping entry names it", pgvalue.ErrGeneratedColumn)})
		}
	}
	for _, c := range t.cols {
		mc, err := columnFor(set, t, c, caps)
		if err != nil {
			return nil, err
		}
		cols = append(cols, mc)
		if c.Key {
			key = append(key, c.Name)
		}
	}
	without := map[string]bool{}
	for _, name := range omit {
		without[name] = true
	}
	m, err := set.ForWithout(db, t.schema, t.name, cols, key, without)
	if err == nil && m.Source.Database != db {
		return nil, outcome.Config.Mark(fmt.Errorf("%w: table %s: the mapping's source database is %s, but %s connects to %s",
			change.ErrConfig, t.qualified(), m.Source.Database, EnvPostgresDSN, db))
	}
	if err == nil {
		if err := pgvalue.CheckNullable(t.qualified(), t.cols, m); err != nil {
			return nil, outcome.Config.Mark(err)
		}
	}
	return m, err
}

// standing maps the source table t as its target st stands: the target's
// columns in its order, with the types it stores, its sorting key (what
// cdc setup and sync both check the target and its live view against).
// The source's changes since (columns added, dropped, renamed, retyped)
// are the stream's to follow at their place. A column whose entry or
// generated mapping is the target's type keeps that column's mapping (its
// max_length, its source_type). It also says why the target must be made
// again (a resync), when it must: the mapping entry now maps a column as
// another type, or the key is another one, or the target holds a
// generated column (an earlier changesink copied it). A column retyped
// since the target took it in keeps the bare type the target stores: the
// stream reads its older values, up to the retype's definition.
func standing(set *mapping.Set, db string, t sourceTable, caps mapping.ServerCaps, sh *shape, st target.Standing,
	fresh *mapping.Mapping) (*mapping.Mapping, string, error) {
	var cols []mapping.Column
	var why []string
	for _, tc := range st.Cols {
		name, stored := tc[0], tc[1]
		col := mapping.Column{Name: name, Type: stored}
		if i := slices.IndexFunc(t.cols, func(c pgvalue.Column) bool { return c.Name == name }); i >= 0 && sh.attnum(name) == t.attnums[i] &&
			sh.followsType(t.cols[i]) {
			mc, err := columnFor(set, t, t.cols[i], caps)
			typ, perr := mapping.ParseType(mc.Type)
			switch {
			case err == nil && perr == nil && typ.SameType(stored):
				col = mc
			case err == nil && perr == nil:
				if _, named := set.Column(t.schema, t.name, name); named {
					why = append(why, fmt.Sprintf("the mapping maps column %s as %s, the target holds %s", name, mc.Type, stored))
				}
			}
		}
		if slices.Contains(t.generated, name) {
			why = append(why, fmt.Sprintf("column %s is generated, and pgoutput does not send its values", name))
		}
		cols = append(cols, col)
	}
	if want := fresh.KeyNames(); t.identity != slot.IdentityFull && !sameSet(keyNames(fresh), st.Key) {
		why = append(why, fmt.Sprintf("the key is now %s, the target's is (%s)", want, strings.Join(st.Key, ", ")))
	}
	m, err := set.ForTarget(db, t.schema, t.name, cols, st.Key)
	if err != nil {
		return nil, "", outcome.Config.Mark(err)
	}
	return m, strings.Join(why, "; "), nil
}

// keyNames are m's key columns.
func keyNames(m *mapping.Mapping) []string {
	out := make([]string, len(m.KeyIdx))
	for n, i := range m.KeyIdx {
		out[n] = m.Cols[i].Name
	}
	return out
}

// openTargets reads the published tables from the catalog, maps each to
// its target as it stands (mapTargets), connects to ClickHouse and checks
// every target. A published table without a target is refused: it needs
// the initial load that cdc setup does.
func (r *syncRun) openTargets(ctx context.Context) error {
	src, err := readCatalog(ctx, r.conn, r.cfg.Publication)
	if err != nil {
		return sourceErr(err)
	}
	if len(src) == 0 {
		return outcome.Config.Mark(fmt.Errorf("%w: publication %s publishes no table", change.ErrConfig, r.cfg.Publication))
	}
	if r.ch, err = target.Connect(ctx, withConns(r.cfg.ClickHouse, len(src)+r.cfg.LoadWorkers), nil); err != nil {
		return err
	}
	return r.mapTargets(ctx, src, false, false)
}

// mapTargets maps every published table src[i] to its target, checks the
// server supports it, and makes the run's tables of them, in name order:
// a target that stands is mapped as it stands (standing), its live view
// made again when it shows other columns; a missing one is made now when
// create (cdc setup), else refused (CheckSchema says so); a target no load
// of the slot wrote, with another shape, is refused (another's table, or a
// table of the trigger flow switched over). What each target
// follows of its source (its shape) is the load ledger's latest schema
// row of it, or, for a target loaded by an earlier changesink, its
// columns by name, recorded once the run holds the locks (recordShapes).
func (r *syncRun) mapTargets(ctx context.Context, src []sourceTable, create, newSlot bool) error {
	ms, err := mappings(r.cfg.Mappings, r.source, src, r.ch.Caps)
	if err != nil {
		return err
	}
	if create {
		if err := r.ch.CreateDatabases(ctx, ms); err != nil {
			return err
		}
	}
	loads, err := r.readLoads(ctx, ms)
	if err != nil {
		return err
	}
	now, err := readNow(ctx, r.conn, oidsOf(src))
	if err != nil {
		return sourceErr(err)
	}
	r.tables = map[uint32]*syncTable{}
	for i, fresh := range ms {
		t := &syncTable{src: src[i], m: fresh, policy: r.cfg.Mappings.Policy(src[i].schema, src[i].name)}
		srv := r.ch.With(fresh)
		if err := srv.CheckSupported(); err != nil {
			return err
		}
		st, err := srv.Standing(ctx)
		if err != nil {
			return fmt.Errorf("table %s: %w", t.name(), err)
		}
		tl := loads[t.name()]
		switch {
		case !st.Found && create:
			if err := strictMapping(r.cfg.Mappings, r.source, src[i], r.ch.Caps); err != nil {
				return err
			}
			if _, err := srv.Setup(ctx); err != nil {
				return fmt.Errorf("table %s: %w", t.name(), err)
			}
			t.created = true
			t.shape, t.record = shapeOf(src[i], fresh, now[src[i].oid]), true
		case st.Found && (tl.Gen != "" || (create && !newSlot)):
			// A target this slot's load wrote, or an earlier setup of the
			// slot made (its load cut before it read the table): as it
			// stands; a load into it reshapes it (reshape).
			if gone := goneColumns(r.cfg.Mappings, src[i]); len(gone) > 0 {
				r.log.Warn(fmt.Sprintf("cdc: the mapping entry of %s names %s, which the table no longer has (dropped): a target that has them keeps them, NULL from the drop on; "+
					"remove them from the entry", t.name(), strings.Join(gone, ", ")))
			}
			sh, ok := decodeShape(tl.Schema.Detail)
			if !ok {
				sh, t.record = adoptShape(src[i], st, now[src[i].oid]), true
			}
			if t.m, t.resync, err = standing(r.cfg.Mappings, r.source, src[i], r.ch.Caps, sh, st, fresh); err != nil {
				return err
			}
			t.shape = sh
		default:
			// A target no load of this slot wrote (a table of the trigger
			// flow, switched over; or another's): as the mapping says, the
			// check refusing another shape.
			t.shape, t.record = adoptShape(src[i], st, now[src[i].oid]), true
		}
		t.hold = tl.Hold
		if !tl.Held {
			t.hold = target.LoadRow{}
		}
		if err := r.openTarget(ctx, t, create && st.Found); err != nil {
			return err
		}
	}
	slices.SortFunc(r.order, func(a, b *syncTable) int {
		return strings.Compare(mapping.Qualified(a.m.Target.Database, a.m.Target.Table), mapping.Qualified(b.m.Target.Database, b.m.Target.Table))
	})
	r.ledger = r.ch.SyncLedger(r.order[0].m.Target.Database)
	return nil
}

// openTarget checks t's target against its mapping and makes its live
// view (again, when it shows other columns); setup, also what Setup makes
// beside a target that stands (its ledger). The table joins the run.
func (r *syncRun) openTarget(ctx context.Context, t *syncTable, setup bool) error {
	srv := r.ch.With(t.m)
	tbl, err := srv.CheckSchema(ctx)
	if err != nil {
		return fmt.Errorf("table %s: %w", t.name(), err)
	}
	if remade, err := srv.SyncView(ctx); err != nil {
		return fmt.Errorf("table %s: %w", t.name(), err)
	} else if remade && !t.created {
		r.log.Info(fmt.Sprintf("cdc: made the live view %s again over the columns of %s",
			mapping.Qualified(t.m.Target.Database, t.m.Target.LiveView), mapping.Qualified(t.m.Target.Database, t.m.Target.Table)))
	}
	if setup {
		if _, err := srv.Setup(ctx); err != nil {
			return fmt.Errorf("table %s: %w", t.name(), err)
		}
	}
	t.srv, t.batch = srv, merge.NewBatch(t.m)
	t.run = &applier.Table{M: t.m, Tbl: tbl, Hooks: r.env.Hooks, Origin: slotOrigin{r: r}, Stop: &r.stop, Res: &t.res, Log: r.log}
	r.tables[t.src.oid] = t
	r.order = append(r.order, t)
	return nil
}

// readLoads reads the load ledger's state of every table (in the
// database of the first target by name, where the ledgers are).
func (r *syncRun) readLoads(ctx context.Context, ms []*mapping.Mapping) (map[string]target.TableLoad, error) {
	first := slices.MinFunc(ms, func(a, b *mapping.Mapping) int {
		return strings.Compare(mapping.Qualified(a.Target.Database, a.Target.Table), mapping.Qualified(b.Target.Database, b.Target.Table))
	})
	ll := r.ch.LoadLedger(first.Target.Database)
	if err := ll.Ensure(ctx); err != nil {
		return nil, err
	}
	return ll.Tables(ctx, r.cfg.Slot)
}

// oidsOf are the tables' OIDs.
func oidsOf(src []sourceTable) []uint32 {
	out := make([]uint32, len(src))
	for i, t := range src {
		out[i] = t.oid
	}
	return out
}

// withConns is c with a connection for each target's lock heartbeat,
// beside those of the queries.
func withConns(c target.ClickHouse, tables int) target.ClickHouse {
	c.Conns = 3 + tables
	return c
}

// lockTargets takes every target's lock, in name order (two runs never
// wait on each other in a cycle).
func (r *syncRun) lockTargets(ctx context.Context) error {
	timing := r.env.Hooks.Timing()
	r.stop.Step = applier.StepLock
	for _, t := range r.order {
		lk, err := t.run.Tbl.Lock(ctx, timing, r.log)
		if err != nil {
			return fmt.Errorf("table %s: %w", t.name(), err)
		}
		t.run.Lock = lk
		if err := lk.SweepAsides(ctx, r.log); err != nil {
			return err
		}
	}
	return testhook.Run(ctx, r.env.Hooks.Locked)
}

// lockFirst puts a lost lock of any target in place of a refusal
// (applier.LockFirst).
func (r *syncRun) lockFirst(ctx context.Context, err error) error {
	for _, t := range r.order {
		if t.run.Lock != nil {
			if err2 := applier.LockFirst(ctx, t.run.Lock, err, r.log); err2 != err {
				return err2
			}
		}
	}
	return err
}

// releaseTargets gives back every lock the run took, even when it was
// stopped.
func (r *syncRun) releaseTargets(ctx context.Context) {
	for _, t := range r.order {
		if lk := t.run.Lock; lk != nil {
			applier.GiveBack(ctx, lk)
		}
	}
}

// slotOrigin is a batch of the stream: it is never decoded again (a
// flush ends at a transaction's end, where no key has two live rows), and
// the ledger records the slot as its source.
type slotOrigin struct{ r *syncRun }

// Redecode refuses: a flush never leaves a key open.
func (o slotOrigin) Redecode(context.Context, *target.Table, []change.OpenKey, bool) (*merge.Batch, error) {
	return nil, outcome.Refused.Mark(fmt.Errorf("%w: the target's ledger ends inside a transaction of the trigger flow, "+
		"which cdc sync cannot continue", change.ErrKeyChange))
}

// Source is the slot, of the source's system and database.
func (o slotOrigin) Source() change.SourceID {
	return change.SourceID{Connector: "pgoutput", Name: o.r.cfg.Slot, Version: o.r.systemID, Db: o.r.source}
}
