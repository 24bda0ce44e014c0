package target

import (
	"context"
	"fmt"
	"time"
)

// The load ledger, <db>._changesink_load beside the sync ledger, records
// what the initial load of each replication slot has done, so that a run
// killed during the load is continued by the next one. It is append-only;
// one load of a slot is a generation (gen, which sorts by when it began),
// begun by a start row:
//
//   - start: the stream position the generation loads for (where the slot
//     stands: its stream starts there), the source's identity;
//   - chunk: a chunk of a table copied and inserted: its page range
//     [lo, hi) (hi 0: to the end) of the table's plan (step pages a
//     chunk), the table's storage when it was read (filenode: a table
//     rewritten since has moved its rows between pages), the LSN its rows
//     are versioned at (point), the xmin of the snapshot it was read under,
//     whether it was a delta (the tuples written since an earlier read of
//     the chunk), its rows and bytes.
//
// The slot's own load (its start row has no table) copies every table the
// publication had then; the sync ledger's first row of the slot says it
// ended. A table that joins the publication later is loaded by a
// generation of its own (its start row names it, tbl), which a done row
// ends: until then sync refuses to stream it.

// loadLedgerName is the load ledger's table name.
const loadLedgerName = "_changesink_load"

// Load ledger row kinds.
const (
	LoadStart = "start"
	LoadChunk = "chunk"
	LoadDone  = "done"
	// LoadSchema records, for one table, the source table as its target
	// follows it (detail: cdc sync's JSON of it), from point on: written
	// at the end of every load of the table and after every change sync
	// follows in the target. The latest of a table is what it follows.
	LoadSchema = "schema"
	// LoadHold holds one table (quarantine): a change of it at point was
	// refused (detail: why); sync skips its changes from then on, until a
	// later generation loads it again (an operator's resync).
	LoadHold = "hold"
)

// loadLedgerColumns are the load ledger's columns, in table order.
var loadLedgerColumns = [][2]string{
	{"slot", "String"},
	{"gen", "String"},
	{"kind", "String"},
	{"tbl", "String"}, // the source table, schema.table
	{"chunk", "UInt32"},
	{"step", "UInt32"},
	{"lo", "UInt32"},
	{"hi", "UInt32"},
	{"filenode", "UInt64"},
	{"point", "UInt64"},
	{"xmin", "UInt64"},
	{"delta", "UInt8"},
	{"rows", "UInt64"},
	{"bytes", "UInt64"},
	{"stream_from", "UInt64"},
	{"system_id", "String"},
	{"source_db", "String"},
	{"holder", "String"},
	{"at", "DateTime"},
	{"relid", "UInt64"},  // the source table's OID (chunk and done rows); 0 in rows written before it was kept
	{"detail", "String"}, // schema and hold rows: what they record; "" in rows written before it was kept
}

// LoadRow is one row of the load ledger (see above for what each kind
// sets).
type LoadRow struct {
	Slot, Gen, Kind, Table string
	Chunk, Step, Lo, Hi    uint32
	Filenode               uint64
	// Point is the LSN a chunk's rows are versioned at; Xmin the xmin of
	// the snapshot it was read under (a later delta of the chunk reads the
	// tuples written since); Delta: it read only those.
	Point, Xmin uint64
	Delta       bool
	Rows, Bytes uint64
	// StreamFrom is the stream position of the generation (a start row).
	StreamFrom         uint64
	SystemID, SourceDB string
	Holder             string
	At                 time.Time
	// Relid is the source table's OID (chunk and done rows): a table
	// dropped and created again under its name is another table.
	Relid uint64
	// Detail is what a schema or hold row records.
	Detail string
}

// LoadLedger is the load ledger of one database.
type LoadLedger struct {
	l *ledgerTable
}

// LoadLedger returns the load ledger in database db.
func (t *Server) LoadLedger(db string) *LoadLedger {
	return &LoadLedger{l: &ledgerTable{s: t, db: db, table: loadLedgerName, what: "load ledger", cols: loadLedgerColumns,
		added: []string{"relid", "detail"}, stamp: "at", orderBy: "(slot, gen, tbl, chunk)"}}
}

// Name is the ledger's qualified name.
func (l *LoadLedger) Name() string { return l.l.name() }

// Ensure creates the ledger when it is missing and checks its columns,
// adding relid and detail to a ledger of an earlier changesink (its rows
// keep 0 and "").
func (l *LoadLedger) Ensure(ctx context.Context) error { return l.l.ensure(ctx) }

// Latest returns every row of the slot's latest generation of table
// (the start row with the highest gen; gens sort by when they began;
// table "": the slot's own load): its start rows first, then its chunks by
// table; none when there is no such generation.
func (l *LoadLedger) Latest(ctx context.Context, slot, table string) ([]LoadRow, error) {
	cctx, cancel := context.WithTimeout(ctx, l.l.s.timeout)
	defer cancel()
	var out []LoadRow
	var r LoadRow
	var delta uint8
	dests := []any{&r.Slot, &r.Gen, &r.Kind, &r.Table, &r.Chunk, &r.Step, &r.Lo, &r.Hi, &r.Filenode,
		&r.Point, &r.Xmin, &delta, &r.Rows, &r.Bytes, &r.StreamFrom, &r.SystemID, &r.SourceDB, &r.Holder, &r.At, &r.Relid, &r.Detail}
	err := l.l.read(cctx, l.l.columnList(true), "WHERE slot = ? AND gen = "+
		"(SELECT max(gen) FROM "+l.Name()+" WHERE slot = ? AND kind = 'start' AND tbl = ?) ORDER BY kind DESC, tbl, chunk, at",
		[]any{slot, slot, table}, dests, func() error {
			r.Delta = delta == 1
			out = append(out, r)
			return nil
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Append writes r, fenced by f (fence.go): the holder checks its lock
// after it.
func (l *LoadLedger) Append(ctx context.Context, r LoadRow, f Fence) error {
	return l.l.append(ctx, []any{r.Slot, r.Gen, r.Kind, r.Table, r.Chunk, r.Step, r.Lo, r.Hi, r.Filenode, r.Point,
		r.Xmin, boolByte(r.Delta), r.Rows, r.Bytes, r.StreamFrom, r.SystemID, r.SourceDB, r.Holder, r.Relid, r.Detail},
		f, fmt.Sprintf("the load ledger's %s row of %s (chunk %d)", r.Kind, r.Table, r.Chunk))
}

// TableLoad is what the load ledger says of one table's load.
type TableLoad struct {
	// Gen is the generation that loads it; Done: that load ended.
	Gen  string
	Done bool
	// Point is the highest point its rows were versioned at: a
	// transaction that commits at or after it was not in the snapshot.
	Point uint64
	// Relid is the OID of the source table it loaded (0: not recorded).
	Relid uint64
	// Held: a hold row later than its load holds the table; Hold is that
	// row (its point the LSN of the change refused, its detail why).
	Held bool
	Hold LoadRow
	// Schema is the table's latest schema row (Gen "": none).
	Schema LoadRow
}

// Tables returns the load of every table of the slot: the tables of the
// slot's own latest generation (done when the sync ledger has a row of
// the slot, which the caller checks; their point the generation's
// highest, as every chunk of a continued load is read again at it), and
// those a later generation of their own loads (done once its done row is
// written).
func (l *LoadLedger) Tables(ctx context.Context, slot string) (map[string]TableLoad, error) {
	cctx, cancel := context.WithTimeout(ctx, l.l.s.timeout)
	defer cancel()
	var all []LoadRow
	var r LoadRow
	err := l.l.read(cctx, "gen, kind, tbl, max(point), max(relid), any(detail)", "WHERE slot = ? GROUP BY gen, kind, tbl",
		[]any{slot}, []any{&r.Gen, &r.Kind, &r.Table, &r.Point, &r.Relid, &r.Detail}, func() error {
			all = append(all, r)
			return nil
		})
	if err != nil {
		return nil, err
	}
	return tableLoads(all), nil
}

// tableLoads is Tables of the slot's rows (their gen, kind, table, point,
// relid; a row may stand for all rows of its gen, kind and table, with
// their highest point and relid).
func tableLoads(all []LoadRow) map[string]TableLoad {
	own := ""                     // the slot's own latest generation
	latest := map[string]string{} // each joined table's latest generation
	for _, r := range all {
		switch {
		case r.Kind == LoadStart && r.Table == "":
			own = max(own, r.Gen)
		case r.Kind == LoadStart:
			latest[r.Table] = max(latest[r.Table], r.Gen)
		}
	}
	var ownPoint uint64
	for _, r := range all {
		if r.Gen == own && r.Kind == LoadChunk {
			ownPoint = max(ownPoint, r.Point)
		}
	}
	out := map[string]TableLoad{}
	for _, r := range all {
		if r.Gen == own && own != "" && r.Kind == LoadChunk {
			out[r.Table] = TableLoad{Gen: own, Done: true, Point: ownPoint, Relid: max(out[r.Table].Relid, r.Relid)}
		}
	}
	for tbl, gen := range latest {
		if gen < own {
			continue // of an earlier load of the slot (made again since)
		}
		tl := TableLoad{Gen: gen}
		for _, r := range all {
			if r.Gen == gen && r.Table == tbl && (r.Kind == LoadChunk || r.Kind == LoadDone) {
				tl.Point, tl.Relid = max(tl.Point, r.Point), max(tl.Relid, r.Relid)
				tl.Done = tl.Done || r.Kind == LoadDone
			}
		}
		out[tbl] = tl
	}
	// A table's latest schema row, and a hold row later than its load.
	for _, r := range all {
		if r.Table == "" || r.Gen < own || (r.Kind != LoadSchema && r.Kind != LoadHold) {
			continue
		}
		tl, ok := out[r.Table]
		if !ok {
			continue
		}
		switch {
		case r.Kind == LoadSchema && r.Gen > tl.Schema.Gen:
			tl.Schema = r
		case r.Kind == LoadHold && r.Gen > tl.Gen && r.Gen > tl.Hold.Gen:
			tl.Held, tl.Hold = true, r
		}
		out[r.Table] = tl
	}
	return out
}
