package cdc

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/applier"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/decode"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/merge"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// decode decodes and checks the batch while it connects to the target and
// checks it (they wait on the network, decoding on the CPUs); a refusal of
// the batch still wins over a connection or schema error, as when they ran
// after.
func (r *applyRun) decode(ctx context.Context) (*merge.Batch, connection, error) {
	m := r.cfg.Mapping
	cctx, stopConnect := context.WithCancel(ctx)
	defer stopConnect()
	connected := make(chan connection, 1)
	go func() { connected <- open(cctx, r.cfg.ClickHouse, m) }()
	b, err := decodeFile(ctx, r.cfg.BatchFile, m, r.cfg.Workers)
	if err == nil && b.Events == 0 {
		err = outcome.Refused.Mark(fmt.Errorf("%s: %w", r.cfg.BatchFile, change.ErrEmptyBatch))
	}
	if err != nil {
		stopConnect()
		if c := <-connected; c.server != nil {
			c.server.Close()
		}
		return nil, connection{}, markInput(err)
	}
	r.res.Decode = time.Since(r.start)
	r.stop.Step = applier.StepConnect
	c := <-connected
	if c.err != nil {
		if c.server != nil {
			c.server.Close()
		}
		return nil, connection{}, c.err
	}
	if c.viewMade {
		r.env.log().Warn(fmt.Sprintf("cdc: the live view %s was missing (dropped by hand?); made it again, as cdc setup does",
			mapping.Qualified(m.Target.Database, m.Target.LiveView)))
	}
	return b, c, nil
}

// connection is the target as open found it, or why it could not.
type connection struct {
	server   *target.Server // nil when the connection failed
	table    *target.Table
	viewMade bool // the live view was missing: open made it again
	err      error
}

// open connects to the target and checks it: the server supports the
// mapping, the table matches it, on a cluster every replica holds the
// target's objects alike (target.Server.CheckReplicaObjects: a replica
// that lacks one is refused, for cdc setup to repair), and the live view
// is a view of the mapped columns. On one server, a missing live view
// (dropped by hand, or by the runbook's "drop the live view" step without
// the cdc setup after it) is made again, as setup makes it: the run's
// summary sends readers to it, and a batch applied without it would leave
// them failing on a missing view.
func open(ctx context.Context, cfg target.ClickHouse, m *mapping.Mapping) connection {
	t, err := target.Connect(ctx, cfg, m)
	if err != nil {
		return connection{err: err}
	}
	if err := t.CheckSupported(); err != nil {
		return connection{server: t, err: err}
	}
	// On a cluster, first: a replica's odd table is named as that
	// replica's, not refused as the whole target's by CheckSchema.
	if err := t.CheckReplicaObjects(ctx); err != nil {
		return connection{server: t, err: err}
	}
	tbl, err := t.CheckSchema(ctx)
	if err != nil {
		return connection{server: t, err: err}
	}
	made, err := t.EnsureView(ctx)
	return connection{server: t, table: tbl, viewMade: made, err: err}
}

// decodeFile decodes and checks the batch file at path into the latest
// row per key (decode.Scan into merge.Batch). Memory holds one row per
// key. Events of a key normally arrive in LSN order, and then every
// equal-LSN pair meets the key's latest row; a key whose events arrive out
// of order is only marked, and a second pass over the file checks those
// keys' versions (merge.History).
func decodeFile(ctx context.Context, path string, m *mapping.Mapping, workers int) (*merge.Batch, error) {
	return decodeFileWith(ctx, path, m, decodeOptions{workers: workers})
}

// decodeOptions say how decodeFileWith reads a batch.
type decodeOptions struct {
	// workers decode segments concurrently; 0 = GOMAXPROCS.
	workers int
	// ionOnly reads every record with ion-go, never with ionrec: the
	// oracle the differential tests hold the default against.
	ionOnly bool
	// seeds are the keys the previous batch left with two live rows.
	seeds map[string]*merge.SeedDual
}

func decodeFileWith(ctx context.Context, path string, m *mapping.Mapping, opts decodeOptions) (*merge.Batch, error) {
	if opts.workers <= 0 {
		opts.workers = runtime.GOMAXPROCS(0)
	}
	scan := decode.Options{Workers: opts.workers, IonOnly: opts.ionOnly}
	b := merge.NewBatch(m)
	b.Seeds = opts.seeds
	if err := decode.Scan(ctx, path, m, scan, b.Reset, b.Add); err != nil {
		return nil, err
	}
	if len(b.OutOfOrder) > 0 {
		h := merge.NewHistory(b)
		if err := decode.Scan(ctx, path, m, scan, h.Reset, h.Check); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// fileOrigin is a batch file of the Debezium trigger (applier.Origin).
type fileOrigin struct {
	path    string
	workers int
	m       *mapping.Mapping
}

// Redecode decodes the file again (redecodeWithSeeds).
func (f fileOrigin) Redecode(ctx context.Context, tbl *target.Table, open []change.OpenKey, replay bool) (*merge.Batch, error) {
	return redecodeWithSeeds(ctx, tbl, f.path, f.workers, open, replay)
}

// Source reads the source identity of the batch's first event.
func (f fileOrigin) Source() change.SourceID { return decode.SourceOf(f.path, f.m) }

// redecodeWithSeeds decodes the batch again, starting the keys the
// previous batch left with two live rows from what it left (the target
// holds their newest row).
func redecodeWithSeeds(ctx context.Context, t *target.Table, path string, workers int, open []change.OpenKey, replay bool) (*merge.Batch, error) {
	keys := make([]*change.Row, 0, len(open))
	for _, o := range open {
		k, err := hex.DecodeString(o.Key)
		if err != nil {
			return nil, outcome.Refused.Mark(fmt.Errorf("%w: the ledger's open key %q is not hex", change.ErrTargetRowUnreadable, o.Key))
		}
		keys = append(keys, &change.Row{Key: string(k), Vals: change.KeyValues(t.M, string(k))})
	}
	cur, err := t.Read(ctx, keys)
	if err != nil {
		return nil, err
	}
	seeds, err := merge.SeedsOf(t.M, open, cur, replay)
	if err != nil {
		return nil, err
	}
	b, err := decodeFileWith(ctx, path, t.M, decodeOptions{workers: workers, seeds: seeds})
	if err != nil {
		return nil, markInput(err)
	}
	return b, nil
}

// markInput marks decode errors: refusals of the input, or a file that
// cannot be read (configuration: the flow did not pass the batch).
func markInput(err error) error {
	var marked *outcome.Error
	if errors.As(err, &marked) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err // already marked, or a stopped run (transient)
	}
	// Not outcome.Classify: it calls both kinds left here internal, an
	// unmarked *RecordError and a file-system error (a directory given as
	// the batch fails its first read with EISDIR); here the first is a
	// refusal of the input and the second a batch the flow did not pass.
	var re *change.RecordError
	if errors.As(err, &re) {
		return outcome.Refused.Mark(err)
	}
	return outcome.Config.Mark(fmt.Errorf("%w: %w", change.ErrConfig, err))
}
