package kafkastate

import (
	"context"

	"github.com/changesink/changesink/internal/outcome"
)

// plan is step 3: each partition's log start offset, last stable offset and
// high watermark; for each of the batch's partitions its saved offset
// within them (ErrOffsetOutOfRange) and its state for the fetch; and the
// tombstone rule before reading.
func (b *batch) plan(ctx context.Context) error {
	topic := b.r.topic
	marks, err := listWatermarks(ctx, b.r.cl, topic, b.meta)
	if err != nil {
		return err
	}
	b.marks = marks
	b.states = make(map[int32]*partState, len(b.parts))
	b.starts = make(Offsets, len(b.parts))
	b.lagged = map[int32]bool{}
	var lagging []partRange
	for _, p := range b.parts {
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
		if start < w.lso && !b.fromStart(p, start) {
			lagging = append(lagging, partRange{partition: p, from: start, end: w.lso})
			b.lagged[p] = true
		}
	}
	b.rule.setAnchor(b.anchors, b.clock, lagging)
	if err := b.rule.beforeRead(lagging); err != nil {
		return outcome.Refused.Mark(err)
	}
	b.ph.mark("offsets")
	return nil
}

// fromStart reports, for a shard, a partition never read: its saved offset
// is 0, the start of a log nothing was ever deleted from (another shard's
// first batch wrote it where the seed starts). Its read is a scan from the
// start, which Kafka's rule anchors at the scan's own start (as a first
// run's), not at when the positions were saved.
func (b *batch) fromStart(p int32, start int64) bool {
	return !b.r.shard.Whole() && start == 0 && b.marks[p].logStart == 0
}
