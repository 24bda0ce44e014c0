package kafkastate

import (
	"context"

	"github.com/changesink/changesink/internal/outcome"
)

// plan is step 3: each partition's log start and last stable offset, its
// saved offset within them (ErrOffsetOutOfRange), its state for the fetch,
// and the tombstone rule before reading.
func (b *batch) plan(ctx context.Context) error {
	topic := b.r.topic
	marks, err := listWatermarks(ctx, b.r.cl, topic, b.meta)
	if err != nil {
		return err
	}
	b.states = make(map[int32]*partState, len(b.meta.partitions))
	b.starts = make(Offsets, len(b.meta.partitions))
	b.lagged = map[int32]bool{}
	var lagging []partRange
	for _, p := range b.meta.partitions {
		w := marks[p]
		start := w.logStart
		if b.saved != nil {
			start = b.saved[p]
		}
		if start < w.logStart || start > w.lso {
			return outcome.Refused.Mark(&OffsetError{Topic: topic, Partition: p, Saved: start, LogStart: w.logStart, End: w.lso})
		}
		b.starts[p] = start
		b.states[p] = &partState{partition: p, start: start, next: start, done: start >= w.lso, end: w.lso, hwm: w.hwm}
		if start < w.lso {
			lagging = append(lagging, partRange{partition: p, from: start, end: w.lso})
			b.lagged[p] = true
		}
	}
	if err := b.rule.beforeRead(lagging); err != nil {
		return outcome.Refused.Mark(err)
	}
	b.ph.mark("offsets")
	return nil
}
