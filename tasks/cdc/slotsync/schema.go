package slotsync

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/merge"
	"github.com/changesink/changesink/tasks/cdc/pgvalue"
	"github.com/changesink/changesink/tasks/cdc/slot"
)

// relationAt says where a table's definition came in the stream: the
// transaction it opens, by its commit LSN and xid (pgoutput sends the
// Relation message itself with no WAL position of its own: 0/0).
func relationAt(ev *slot.Event) string {
	if ev.Tx.FinalLSN != 0 {
		return fmt.Sprintf("in the transaction committed at %s (xid %d)", ev.Tx.FinalLSN, ev.Tx.Xid)
	}
	return fmt.Sprintf("at %s", ev.WALStart)
}

// relation takes in a table's definition, which the stream reports before
// the table's first change and again after every change to its columns.
// Against the mapping: a column the source added is added to the target
// (schema_changes add_columns: Nullable, after the flush of the
// transactions before it); a column the source dropped stays in the
// target, NULL from then on; a retyped column, a changed key, and any
// change under schema_changes refuse, are refused, naming the columns.
func (r *syncRun) relation(ctx context.Context, ev *slot.Event) error {
	t := r.tables[ev.Relation.ID]
	if t == nil {
		// A table that joined the publication after the run began: a
		// Relation is not a change; its first change ends the run there
		// (r.table, endAtJoin).
		return nil
	}
	rel := ev.Relation
	added, dropped, retyped, key := t.compare(rel, r.ch.Caps, r.cfg.Mappings)
	if len(added)+len(dropped)+len(retyped) > 0 || key != "" {
		why := describeChange(added, dropped, retyped, key)
		switch {
		case t.policy == mapping.Refuse, len(retyped) > 0, key != "":
			// The run applies the transactions before the change first
			// (applyBefore): the refusal stops the stream at the change.
			return outcome.Refused.Mark(fmt.Errorf("table %s %s: %w: %s", t.name(), relationAt(ev), change.ErrSchemaChange, why))
		}
		if len(added) > 0 {
			if err := r.addColumns(ctx, t, added); err != nil {
				return err
			}
		}
		r.log.Warn(fmt.Sprintf("cdc: table %s changed %s (%s): %s", t.name(), relationAt(ev), why,
			"added columns are Nullable in the target; dropped ones stay, NULL from now on"))
	}
	if err := t.decoders(rel); err != nil {
		return err
	}
	cols := make([]pgvalue.Column, len(rel.Columns))
	for i, c := range rel.Columns {
		cols[i] = t.sourceColumn(c)
	}
	t.src.cols = cols
	return nil
}

// sameSet reports whether a and b hold the same names, in any order.
func sameSet(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(s string) bool { return !slices.Contains(b, s) })
}

// addedColumn maps a column the source added, as the next run's mapping
// will map it (mapTable): the entry's column when set's entry names one,
// else as pgvalue.Generate maps it, Nullable. An entry's column must be
// Nullable: the rows written before it have no value.
func (t *syncTable) addedColumn(src pgvalue.Column, caps mapping.ServerCaps, set *mapping.Set) (mapping.Column, error) {
	if named, ok := set.Column(t.src.schema, t.src.name, src.Name); ok {
		if !strings.HasPrefix(named.Type, "Nullable(") {
			return mapping.Column{}, fmt.Errorf("the mapping maps it as %s, and an added column is Nullable (the rows before it have none): map it as Nullable(%s)",
				named.Type, named.Type)
		}
		return named, nil
	}
	src.NotNull, src.Key = false, false
	return pgvalue.Generate(t.name(), src, caps)
}

// compare returns what differs between the relation and the mapping:
// columns added (addedColumn),
// dropped, retyped (their type now maps to another ClickHouse type than
// the target's), and a changed key (its description).
func (t *syncTable) compare(rel *slot.Relation, caps mapping.ServerCaps, set *mapping.Set) (added []mapping.Column, dropped, retyped []string, key string) {
	var keys []string
	for _, c := range rel.Columns {
		src := t.sourceColumn(c)
		if c.Key && t.src.identity != slot.IdentityFull {
			keys = append(keys, c.Name)
		}
		j, ok := t.m.ByName[c.Name]
		if !ok {
			mc, err := t.addedColumn(src, caps, set)
			if err != nil {
				retyped = append(retyped, c.Name+" (a new column: "+err.Error()+")")
				continue
			}
			added = append(added, mc)
			continue
		}
		if _, err := pgvalue.NewDecoder(src, &t.m.Cols[j]); err != nil {
			retyped = append(retyped, c.Name)
		}
	}
	for _, c := range t.m.Cols {
		if rel.Column(c.Name) < 0 {
			dropped = append(dropped, c.Name)
		}
	}
	if t.src.identity != slot.IdentityFull && !sameSet(keys, t.m.Key) {
		key = fmt.Sprintf("the key is now (%s), the target's is %s", strings.Join(keys, ", "), t.m.KeyNames())
	}
	return added, dropped, retyped, key
}

// describeChange says what changed, for messages.
func describeChange(added []mapping.Column, dropped, retyped []string, key string) string {
	var parts []string
	if len(added) > 0 {
		names := make([]string, len(added))
		for i, c := range added {
			names[i] = c.Name
		}
		parts = append(parts, "added "+strings.Join(names, ", "))
	}
	if len(dropped) > 0 {
		parts = append(parts, "dropped "+strings.Join(dropped, ", "))
	}
	if len(retyped) > 0 {
		parts = append(parts, "retyped "+strings.Join(retyped, ", "))
	}
	if key != "" {
		parts = append(parts, key)
	}
	return strings.Join(parts, "; ")
}

// addColumns adds the columns the source added to t's target: the
// transactions before the change are applied first (their rows have the
// old columns), then the target's table and live view, then the mapping;
// the rows of the transaction being read get NULL in the new columns.
func (r *syncRun) addColumns(ctx context.Context, t *syncTable, added []mapping.Column) error {
	if err := r.applyFlush(ctx); err != nil {
		return err
	}
	m := t.m
	for _, c := range added {
		var err error
		if m, err = m.With(c); err != nil {
			return err
		}
	}
	srv := t.srv.With(m)
	tbl, err := srv.AddColumns(ctx)
	if err != nil {
		return fmt.Errorf("table %s: %w", t.name(), err)
	}
	for i := range t.open {
		for range added {
			t.open[i].Vals = append(t.open[i].Vals, change.Value{Null: true})
		}
	}
	t.m, t.srv, t.batch = m, srv, merge.NewBatch(m)
	t.run.M, t.run.Tbl = m, tbl
	return nil
}
