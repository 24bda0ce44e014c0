package cdc

import (
	"context"
	"runtime"

	"github.com/changesink/changesink/tasks/cdc/decode"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/merge"
)

// decodeFile decodes and validates the batch file at path into the latest
// row per key. Text Ion (Kestra 1.x, one value per line) is cut into
// segments of whole lines and binary Ion (Kestra 2.x, a version marker
// before each row) into segments that start at a version marker; workers
// decode segments concurrently and the caller's goroutine merges their rows
// in file order, so record numbers and the first refusal are the same as a
// one-stream decode gives. Input that cannot be cut that way (a binary
// stream with one symbol table, values spanning lines) is decoded as one
// stream.
//
// Memory holds one row per key. Events of a key normally arrive in LSN
// order, and then every equal-LSN pair meets the key's latest row; a key
// whose events arrive out of order is only marked, and a second pass over
// the file checks those keys' versions (see history).
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
	// seeds are the keys the previous batch left with two live rows (batch.go).
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
