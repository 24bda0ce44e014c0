package slotsync

import (
	"context"
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
	// open holds the rows of the transaction being read; rows counts the
	// rows of the flush being gathered.
	open []change.Row
	rows int64
	// held: the target held rows when the load began (refuseNewer); a
	// target that held none has no key for deleteGone to delete.
	held bool
	// floor is the point its load versioned its rows at (readFloors).
	floor uint64
}

func (t *syncTable) name() string { return t.src.qualified() }

// mappings maps every published table to its target: the mapping file's
// entry, or one from the source's catalog (pgvalue.Generate), checked to
// be distinct.
func mappings(set *mapping.Set, db string, tables []sourceTable, caps mapping.ServerCaps) ([]*mapping.Mapping, error) {
	var out []*mapping.Mapping
	for _, t := range tables {
		m, err := mapTable(set, db, t, caps, nil, nil)
		if err != nil {
			return nil, err
		}
		if m.Target.Cluster != "" {
			// Its sync ledger and initial load are one server's
			// (docs/design/clickhouse-cluster.md).
			return nil, outcome.Config.Mark(fmt.Errorf("%w: table %s: target.cluster is %q, and cdc sync does not write targets on a cluster yet; "+
				"apply their batches with cdc apply", change.ErrConfig, t.qualified(), m.Target.Cluster))
		}
		out = append(out, m)
	}
	return out, mapping.CheckDistinct(out)
}

// mapTable maps the source table t, leaving out its columns in skip and
// adding the columns extra (the target's, which the source dropped).
func mapTable(set *mapping.Set, db string, t sourceTable, caps mapping.ServerCaps, skip map[string]bool, extra []mapping.Column) (*mapping.Mapping, error) {
	var cols []mapping.Column
	var key []string
	for _, c := range t.cols {
		if skip[c.Name] {
			continue
		}
		// The entry's column, when it names one, takes the generated one's
		// place (Set.For); a type none is generated for needs one.
		mc, ok := set.Column(t.schema, t.name, c.Name)
		if !ok {
			var err error
			if mc, err = pgvalue.Generate(t.qualified(), c, caps); err != nil {
				return nil, outcome.Config.Mark(err)
			}
		}
		cols = append(cols, mc)
		if c.Key {
			key = append(key, c.Name)
		}
	}
	m, err := set.ForWithout(db, t.schema, t.name, append(cols, extra...), key, skip)
	if err == nil && m.Source.Database != db {
		return nil, outcome.Config.Mark(fmt.Errorf("%w: table %s: the mapping's source database is %s, but %s connects to %s",
			change.ErrConfig, t.qualified(), m.Source.Database, EnvPostgresDSN, db))
	}
	return m, err
}

// openTargets reads the published tables from the catalog, maps each to
// its target, connects to ClickHouse and checks every target: the server
// supports it, the table matches its mapping (cdc setup made it), the
// live view is there. A published table without a target is refused: it
// needs the initial load that cdc setup does.
func (r *syncRun) openTargets(ctx context.Context) error {
	src, err := readCatalog(ctx, r.conn, r.cfg.Publication)
	if err != nil {
		return sourceErr(err)
	}
	if len(src) == 0 {
		return outcome.Config.Mark(fmt.Errorf("%w: publication %s publishes no table", change.ErrConfig, r.cfg.Publication))
	}
	if r.ch, err = target.Connect(ctx, withConns(r.cfg.ClickHouse, len(src)), nil); err != nil {
		return err
	}
	ms, err := mappings(r.cfg.Mappings, r.source, src, r.ch.Caps)
	if err != nil {
		return err
	}
	if err := r.evolved(ctx, src, ms); err != nil {
		return err
	}
	return r.openTargetsOf(ctx, src, ms)
}

// evolved maps each table as its target stands after changes of the
// source's columns between runs, under schema_changes: add_columns: a
// column the target lacks (the source added it since) is left out, and
// the stream adds it to the target when it reaches the change, after the
// transactions before it (schema.go); a column the source dropped
// stays mapped, as the target holds it, NULL from the change on. Without
// this the target's check would refuse the run, and the stream would
// never reach the change.
func (r *syncRun) evolved(ctx context.Context, src []sourceTable, ms []*mapping.Mapping) error {
	for i, m := range ms {
		if r.cfg.Mappings.Policy(src[i].schema, src[i].name) != mapping.AddColumns {
			continue
		}
		have, found, err := r.ch.With(m).TargetColumns(ctx)
		if err != nil {
			return err
		}
		if !found {
			continue // the target's check refuses it, naming it
		}
		inTarget := map[string]bool{}
		var extra []mapping.Column
		var dropped []string
		for _, c := range have {
			inTarget[c[0]] = true
			if _, ok := m.ByName[c[0]]; !ok {
				extra = append(extra, mapping.Column{Name: c[0], Type: c[1]})
				dropped = append(dropped, c[0])
			}
		}
		skip := map[string]bool{}
		var added []string
		for _, c := range m.Cols {
			if !inTarget[c.Name] && !c.IsKey {
				skip[c.Name] = true
				added = append(added, c.Name)
			}
		}
		if len(skip)+len(extra) == 0 {
			continue
		}
		if ms[i], err = mapTable(r.cfg.Mappings, r.source, src[i], r.ch.Caps, skip, extra); err != nil {
			return err
		}
		r.log.Info(fmt.Sprintf("cdc: table %s changed since its target was written (added: %s; dropped: %s): "+
			"the stream applies the change when it reaches it", src[i].qualified(), orNone(added), orNone(dropped)))
	}
	return nil
}

// orNone joins names, or says none.
func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// openTargetsOf checks the target of each published table src[i], mapped
// by ms[i], and makes the run's tables of them, in name order.
func (r *syncRun) openTargetsOf(ctx context.Context, src []sourceTable, ms []*mapping.Mapping) error {
	r.tables = map[uint32]*syncTable{}
	for i, m := range ms {
		srv := r.ch.With(m)
		if err := srv.CheckSupported(); err != nil {
			return err
		}
		tbl, err := srv.CheckSchema(ctx)
		if err != nil {
			return fmt.Errorf("table %s: %w", src[i].qualified(), err)
		}
		if _, err := srv.EnsureView(ctx); err != nil {
			return err
		}
		t := &syncTable{src: src[i], m: m, policy: r.cfg.Mappings.Policy(src[i].schema, src[i].name), srv: srv,
			batch: merge.NewBatch(m)}
		t.run = &applier.Table{M: m, Tbl: tbl, Hooks: r.env.Hooks, Origin: slotOrigin{r: r}, Stop: &r.stop, Res: &t.res, Log: r.log}
		r.tables[src[i].oid] = t
		r.order = append(r.order, t)
	}
	slices.SortFunc(r.order, func(a, b *syncTable) int {
		return strings.Compare(mapping.Qualified(a.m.Target.Database, a.m.Target.Table), mapping.Qualified(b.m.Target.Database, b.m.Target.Table))
	})
	r.ledger = r.ch.SyncLedger(r.order[0].m.Target.Database)
	return nil
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
