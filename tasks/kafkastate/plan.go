package kafkastate

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

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
		// Refused by time: the partitions nothing live was stored from
		// are first scans, not resumed reads.
		if lagging, err = b.withoutLiveValues(ctx, lagging); err != nil {
			return err
		}
		b.rule.setAnchor(b.anchors, b.clock, lagging)
		if err := b.rule.beforeRead(lagging); err != nil {
			return outcome.Refused.Mark(err)
		}
	}
	b.ph.mark("offsets")
	return nil
}

// withoutLiveValues takes out of lagging the partitions from which the
// table holds no live value (none ever read: another shard's first batch
// saved them at their log start offset, whatever it was; or every key
// read from them deleted since). A tombstone the cleaner removed there
// could only delete a value the table does not hold, so their read is a
// scan anchored at its own start, as a first run's (afterRead), not at
// when the positions were saved. Asked only when the rule would refuse:
// for a partition with no live value it reads the topic's rows.
func (b *batch) withoutLiveValues(ctx context.Context, lagging []partRange) ([]partRange, error) {
	parts := make([]int32, len(lagging))
	for i, p := range lagging {
		parts[i] = p.partition
	}
	qctx, cancel := context.WithTimeout(ctx, pgTimeout)
	defer cancel()
	rows, err := b.tx.Query(qctx, sqlPartitionsWithoutLiveValues, b.r.topic, parts)
	if err != nil {
		return nil, pgErr(ctx, err, "read which partitions kafka_state.records holds live values of")
	}
	empty, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, pgErr(ctx, err, "read which partitions kafka_state.records holds live values of")
	}
	return slices.DeleteFunc(lagging, func(p partRange) bool {
		if slices.Contains(empty, p.partition) {
			delete(b.lagged, p.partition)
			return true
		}
		return false
	}), nil
}

// fromStart reports, for a shard, a partition never read: its saved offset
// is 0, the start of a log nothing was ever deleted from (another shard's
// first batch wrote it where the seed starts). Its read is a scan from the
// start, which Kafka's rule anchors at the scan's own start (as a first
// run's), not at when the positions were saved.
func (b *batch) fromStart(p int32, start int64) bool {
	return !b.r.shard.Whole() && start == 0 && b.marks[p].logStart == 0
}
