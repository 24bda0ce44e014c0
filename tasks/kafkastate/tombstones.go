package kafkastate

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// The tombstone rule: a batch must not read past a tombstone the cleaner
// may have removed before the batch got to it. Kafka's cleaner keeps a
// tombstone at least delete.retention.ms after the cleaning pass that first
// compacted it (that pass stamps the batch with a delete horizon: the
// pass's start plus delete.retention.ms); later passes drop it. A pass never cleans past the
// last stable offset, so a record that was not yet stable at time A cannot
// lose its tombstone before A + delete.retention.ms. A batch that reads a
// tombstone's offset after that, with nothing there any more, would leave
// the key's stored value live for ever. So:
//
//   - kafka_state.positions.updated_at is the start of the last batch after
//     which every partition had been read to its end (a batch that
//     MAX_RECORDS or POLL_SECONDS cut leaves it; the first batch sets it):
//     every record at or past a saved next offset became stable after it,
//     or, before the first catch-up, was still in the log when the first
//     batch began reading;
//   - before reading, a partition with unread records (saved next offset
//     below the last stable offset) is refused when more than the allowed
//     time has passed since updated_at, by PostgreSQL's clock at both ends;
//   - after reading, before anything is written, every partition the batch
//     advanced is refused when its reads ended later than the allowed time
//     after updated_at (a partition that had unread records at the start)
//     or after the batch's start (a first run, or a partition that was at
//     its end): Kafka's own rule that a scan must finish within
//     delete.retention.ms.
//
// The allowed time is delete.retention.ms less a margin (a tenth of it, at
// most 5 minutes) for a cleaning pass in progress when a batch starts and
// for the two clocks' rates. A partition whose saved offset is its last
// stable offset is never refused: nothing was written to it since; nor is
// one from which the table holds no live value (plan: withoutLiveValues),
// read as a first run's scan: a lost tombstone there deletes nothing. A topic
// whose cleanup.policy has no compact drops tombstones only with whole
// segments, which moves the log start offset past them, and that is
// ErrOffsetOutOfRange. The rule cannot see a delete.retention.ms that was
// lower before, nor an updated_at written by the seed (which sets it on
// every batch, cut or not).

// maxRetentionMargin caps the margin taken off delete.retention.ms.
const maxRetentionMargin = 5 * time.Minute

// deleteRetention returns delete.retention.ms as a duration (the largest
// duration when it does not fit: a topic that keeps tombstones for ever).
func (r retention) deleteRetention() time.Duration {
	if r.deleteRetentionMs > math.MaxInt64/int64(time.Millisecond) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(r.deleteRetentionMs) * time.Millisecond
}

// margin is what the rule takes off delete.retention.ms.
func (r retention) margin() time.Duration { return min(r.deleteRetention()/10, maxRetentionMargin) }

// allowed is the longest a batch's reads may end after their anchor.
func (r retention) allowed() time.Duration { return r.deleteRetention() - r.margin() }

// TombstoneWindow is how long after kafka_state.positions.updated_at a
// batch of a compacted topic whose delete.retention.ms is deleteRetentionMs
// may still read records written since: delete.retention.ms less the
// rule's margin. Later, Materialize refuses with ErrTombstonesMayBeLost.
func TombstoneWindow(deleteRetentionMs int64) time.Duration {
	return retention{compact: true, deleteRetentionMs: deleteRetentionMs}.allowed()
}

// tombstoneRule applies the rule to one batch.
type tombstoneRule struct {
	topic string
	ret   retention
	// hasPositions: the batch resumes from saved positions.
	hasPositions bool
	// updatedAt is the anchor (the positions' updated_at, or for a shard a
	// later kafka_state.shards.caught_up_at: the earliest of the batch's
	// partitions with unread records), named by anchorName; sinceUpdated the
	// time from it to PostgreSQL's clock_timestamp() at checked (Go's
	// monotonic clock).
	updatedAt    time.Time
	anchorName   string
	sinceUpdated time.Duration
	checked      time.Time
}

// anchor is when a partition was last read to its end, and the column that
// says so.
type anchor struct {
	at   time.Time
	name string
}

// setAnchor sets the rule's anchor from the partitions' anchors: the
// earliest of those with unread records (lagging), else of all; clock is
// PostgreSQL's clock when they were read.
func (r *tombstoneRule) setAnchor(anchors map[int32]anchor, clock time.Time, lagging []partRange) {
	var first anchor
	pick := func(p int32) {
		if a, ok := anchors[p]; ok && (first.at.IsZero() || a.at.Before(first.at)) {
			first = a
		}
	}
	for _, p := range lagging {
		pick(p.partition)
	}
	if first.at.IsZero() {
		for p := range anchors {
			pick(p)
		}
	}
	r.updatedAt, r.anchorName, r.sinceUpdated = first.at, first.name, clock.Sub(first.at)
}

// partRange is one partition's range at the start of a batch.
type partRange struct {
	partition int32
	// from is the batch's start offset (the saved next offset), end the
	// last stable offset at the start, to the offset the batch reached.
	from, end, reached int64
}

// beforeRead refuses when a partition has unread records and more than the
// allowed time has passed since updatedAt. lagging are the partitions whose
// saved offset is below their last stable offset.
//
// An updatedAt ahead of PostgreSQL's clock by more than the margin (the
// positions restored from a server whose clock ran ahead, edited by hand,
// or the clock set back) says nothing about when the partitions were last
// caught up, so lagging partitions are refused too: without it the elapsed
// time is negative and the rule would be off until that future time.
func (r tombstoneRule) beforeRead(lagging []partRange) error {
	if !r.ret.compact || !r.hasPositions || len(lagging) == 0 {
		return nil
	}
	if r.sinceUpdated < -r.ret.margin() {
		return &TombstoneError{Topic: r.topic, Partitions: lagging, Elapsed: r.sinceUpdated, UpdatedAt: r.updatedAt, AnchorName: r.anchorName,
			Retention: r.ret, Future: true}
	}
	if r.sinceUpdated <= r.ret.allowed() {
		return nil
	}
	return &TombstoneError{Topic: r.topic, Partitions: lagging, Elapsed: r.sinceUpdated, UpdatedAt: r.updatedAt, AnchorName: r.anchorName, Retention: r.ret}
}

// afterRead refuses when the batch advanced a partition later than the
// allowed time after its anchor: updatedAt for a partition that had unread
// records at the start (lagged), the check for the others. advanced are the
// partitions the batch moved forward, lagged says which of them had unread
// records at the start.
func (r tombstoneRule) afterRead(advanced []partRange, lagged map[int32]bool) error {
	if !r.ret.compact {
		return nil
	}
	read := time.Since(r.checked)
	var late, lateLagged []partRange
	for _, p := range advanced {
		switch {
		case lagged[p.partition] && r.hasPositions && r.sinceUpdated+read > r.ret.allowed():
			lateLagged = append(lateLagged, p)
		case read > r.ret.allowed():
			late = append(late, p)
		}
	}
	if len(lateLagged) > 0 {
		return &TombstoneError{Topic: r.topic, Partitions: lateLagged, Elapsed: r.sinceUpdated + read, UpdatedAt: r.updatedAt,
			AnchorName: r.anchorName, Retention: r.ret, AfterRead: true, Read: read}
	}
	if len(late) > 0 {
		return &TombstoneError{Topic: r.topic, Partitions: late, Elapsed: read, Retention: r.ret, AfterRead: true, Read: read}
	}
	return nil
}

// TombstoneError says that tombstones may have been removed from the topic
// before the batch read them (see the tombstone rule above). It unwraps to
// ErrTombstonesMayBeLost (and ErrReadsTooSlow).
type TombstoneError struct {
	Topic string
	// Partitions are the partitions at risk: their start offset, the last
	// stable offset at the start and, after the reads, the offset reached.
	Partitions []partRange
	// Elapsed is the time from the anchor (UpdatedAt, or the batch's start
	// when UpdatedAt is zero) to the check.
	Elapsed   time.Duration
	UpdatedAt time.Time
	// AnchorName is the column UpdatedAt was read from: "" for
	// kafka_state.positions.updated_at, else kafka_state.shards.caught_up_at.
	AnchorName string
	Retention  retention
	// AfterRead: found after the batch's reads, which took Read.
	AfterRead bool
	Read      time.Duration
	// Future: UpdatedAt is ahead of PostgreSQL's clock by -Elapsed.
	Future bool
}

// maxNamedPartitions bounds how many partitions a TombstoneError names.
const maxNamedPartitions = 8

func (e *TombstoneError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "topic %q: %s: ", e.Topic, ErrTombstonesMayBeLost)
	if len(e.Partitions) == 1 {
		b.WriteString("partition ")
	} else {
		b.WriteString("partitions ")
	}
	for i, p := range e.Partitions {
		if i == maxNamedPartitions {
			fmt.Fprintf(&b, " and %d more", len(e.Partitions)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		if e.AfterRead {
			fmt.Fprintf(&b, "%d (read from saved offset %d to %d)", p.partition, p.from, p.reached)
		} else {
			fmt.Fprintf(&b, "%d (unread from saved offset %d to %d)", p.partition, p.from, p.end)
		}
	}
	if e.Future {
		fmt.Fprintf(&b, ": %s %s is %s ahead of PostgreSQL's clock (more than the margin of %s), "+
			"so when every partition was last read to its end is unknown; nothing was changed",
			e.anchor(), e.UpdatedAt.UTC().Format(time.RFC3339Nano), roundDuration(-e.Elapsed), roundDuration(e.Retention.margin()))
		return b.String()
	}
	anchor := "the start of this batch"
	if !e.UpdatedAt.IsZero() {
		anchor = e.anchor() + " " + e.UpdatedAt.UTC().Format(time.RFC3339Nano) +
			" (the start of the last batch that read every partition to its end)"
	}
	when := "have passed since"
	if e.AfterRead {
		when = fmt.Sprintf("had passed by the end of this batch's reads (which took %s) since", roundDuration(e.Read))
	}
	fmt.Fprintf(&b, ": %s %s %s, more than the topic's delete.retention.ms=%d (less a margin of %s) allows; nothing was changed",
		roundDuration(e.Elapsed), when, anchor, e.Retention.deleteRetentionMs, roundDuration(e.Retention.margin()))
	if e.readsTooSlow() {
		b.WriteString("; " + ErrReadsTooSlow.Error())
	}
	return b.String()
}

// Unwrap returns ErrTombstonesMayBeLost, and ErrReadsTooSlow for a batch
// whose own reads took too long.
func (e *TombstoneError) Unwrap() []error {
	if e.readsTooSlow() {
		return []error{ErrReadsTooSlow, ErrTombstonesMayBeLost}
	}
	return []error{ErrTombstonesMayBeLost}
}

// readsTooSlow: the batch's own reads, with no saved anchor before them,
// took longer than delete.retention.ms allows.
func (e *TombstoneError) readsTooSlow() bool { return e.AfterRead && e.UpdatedAt.IsZero() }

// anchor names the column UpdatedAt comes from.
func (e *TombstoneError) anchor() string {
	if e.AnchorName == "" {
		return "kafka_state.positions.updated_at"
	}
	return e.AnchorName
}

// roundDuration prints d to a millisecond (to a second from a minute up).
func roundDuration(d time.Duration) string {
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}
