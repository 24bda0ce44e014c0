package kafkastate

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/changesink/changesink/internal/outcome"
)

// rejectChunk bounds the records one statement of keepRejected writes.
const rejectChunk = 1000

// logRejectedMax bounds the WARN lines a batch logs for its rejected
// records; one more line says how many were not named.
const logRejectedMax = 20

// requireRejected refuses, in ON_BAD_RECORD=reject, a database without
// kafka_state.rejected (ErrNoRejectedTable, a configuration error), once
// per run, before a shard's claim and before anything is read: setup
// creates the table.
func (b *batch) requireRejected(ctx context.Context) error {
	r := b.r
	if !r.reject || r.rejectedKnown {
		return nil
	}
	conn, err := r.connection(ctx)
	if err != nil {
		return err
	}
	var ok bool
	if err := queryRow(ctx, conn, "look for kafka_state.rejected", sqlHasRejected, nil, &ok); err != nil {
		return err
	}
	if !ok {
		return outcome.Config.Mark(fmt.Errorf("topic %q: %w", r.topic, ErrNoRejectedTable))
	}
	r.rejectedKnown = true
	return nil
}

// keepRejected writes the records the batch kept aside into
// kafka_state.rejected, in the batch's transaction (so with its
// positions, exactly once): their keys' stored values stay as they were.
func (b *batch) keepRejected(ctx context.Context) error {
	if len(b.rejected) == 0 {
		return nil
	}
	slices.SortFunc(b.rejected, func(x, y rejectedRow) int {
		return cmp.Or(cmp.Compare(x.partition, y.partition), cmp.Compare(x.offset, y.offset))
	})
	for rows := range slices.Chunk(b.rejected, rejectChunk) {
		parts := make([]int32, len(rows))
		offsets := make([]int64, len(rows))
		keys := make([][]byte, len(rows))
		values := make([][]byte, len(rows))
		errs := make([]string, len(rows))
		for i, row := range rows {
			parts[i], offsets[i], keys[i], values[i] = row.partition, row.offset, row.key, row.value
			errs[i] = row.err.Err.Error()
			if row.err.Detail != "" {
				errs[i] += " (" + row.err.Detail + ")"
			}
		}
		if err := execSQL(ctx, b.tx, "write kafka_state.rejected", sqlWriteRejected, b.r.topic, parts, offsets, keys, values, errs); err != nil {
			return err
		}
	}
	b.ph.mark("rejected")
	return nil
}

// logRejected logs, once the batch is committed, each record it kept
// aside at WARN: topic, partition, offset, key and the rule broken, never
// the value (at most logRejectedMax lines, then how many more).
func (b *batch) logRejected() {
	for i, row := range b.rejected {
		if i == logRejectedMax {
			b.r.log.Warn(fmt.Sprintf("kafka-state: topic %s: and %d more records kept aside in kafka_state.rejected by this batch",
				b.r.topic, len(b.rejected)-i))
			return
		}
		b.r.log.Warn("kafka-state: kept aside in kafka_state.rejected (ON_BAD_RECORD=reject): " + row.err.Error())
	}
}
