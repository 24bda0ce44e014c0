package kafkastate

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/outcome"
)

// begin is the start of step 2: the batch's transaction on the run's
// connection, with its settings, and the topic lock (a shard's: the topic
// in shared mode and its partitions).
func (b *batch) begin(ctx context.Context) error {
	conn, err := b.r.connection(ctx)
	if err != nil {
		return err
	}
	if b.tx, err = begin(ctx, conn); err != nil {
		return err
	}
	for _, s := range []struct{ what, sql string }{
		{"set statement_timeout", sqlStatementTimeout},
		{"set work_mem", sqlWorkMem},
		{"set temp_buffers", sqlTempBuffers},
		{"set jit", sqlNoJIT},
		{"set client_connection_check_interval", sqlConnectionCheck},
	} {
		if err := execSQL(ctx, b.tx, s.what, s.sql); err != nil {
			return err
		}
	}
	return takeTopicLock(ctx, b.tx, b.r.topic, b.r.shard, b.parts)
}

// readPositions is the rest of step 2: the saved positions, checked against
// the topic's metadata, and the tombstone rule's anchor of each of the
// batch's partitions: the positions' updated_at, or a later caught_up_at
// in kafka_state.shards, by PostgreSQL's clock.
func (b *batch) readPositions(ctx context.Context) error {
	topic := b.r.topic
	saved, err := readPositions(ctx, b.tx, topic, b.meta, !b.r.shard.Whole())
	if err != nil {
		return err
	}
	b.saved = saved
	b.rule = tombstoneRule{topic: topic, ret: b.r.ret, hasPositions: saved != nil}
	if saved != nil {
		var updatedAt time.Time
		if err := queryRow(ctx, b.tx, "read kafka_state.positions.updated_at", sqlPositionsClock, []any{topic}, &updatedAt, &b.clock); err != nil {
			return err
		}
		b.anchors = make(map[int32]anchor, len(b.parts))
		for _, p := range b.parts {
			b.anchors[p] = anchor{at: updatedAt, name: "kafka_state.positions.updated_at"}
		}
		if err := b.readCaughtUp(ctx); err != nil {
			return err
		}
	}
	b.rule.checked = time.Now()
	b.ph.mark("lock+positions")
	return nil
}

// readCaughtUp moves the anchor of each of the batch's partitions to when a
// shard last read it to its end, when that is not earlier (kafka_state.shards;
// a database without the table has no such times).
func (b *batch) readCaughtUp(ctx context.Context) error {
	has, err := b.r.shardsTable(ctx, b.tx)
	if err != nil || !has {
		return err
	}
	rows, err := b.tx.Query(ctx, sqlCaughtUp, b.r.topic, b.parts)
	if err != nil {
		return pgErr(ctx, err, "read kafka_state.shards")
	}
	defer rows.Close()
	for rows.Next() {
		var (
			p  int32
			at time.Time
		)
		if err := rows.Scan(&p, &at); err != nil {
			return pgErr(ctx, err, "read kafka_state.shards")
		}
		if !at.Before(b.anchors[p].at) {
			b.anchors[p] = anchor{at: at, name: "kafka_state.shards.caught_up_at"}
		}
	}
	if err := rows.Err(); err != nil {
		return pgErr(ctx, err, "read kafka_state.shards")
	}
	return nil
}

// readPositions reads the saved positions (FOR UPDATE, unless shared: a
// shard's read, which other shards' writes must not wait for) and applies
// the seed's checks against the broker's metadata. It returns nil when
// there is no positions row (first run).
func readPositions(ctx context.Context, tx pgx.Tx, topic string, meta topicMeta, shared bool) (Offsets, error) {
	var (
		raw                []byte
		clusterID, topicID string
	)
	read := sqlReadPositions
	if shared {
		read = sqlReadPositionsShared
	}
	qctx, cancel := context.WithTimeout(ctx, pgTimeout)
	err := tx.QueryRow(qctx, read, topic).Scan(&raw, &clusterID, &topicID)
	cancel()
	if errors.Is(err, pgx.ErrNoRows) {
		err := noPositions(ctx, tx, topic, shared)
		if errors.Is(err, errPositionsNow) {
			return readPositions(ctx, tx, topic, meta, shared)
		}
		return nil, err
	}
	if err != nil {
		return nil, pgErr(ctx, err, "read kafka_state.positions")
	}
	if clusterID != meta.clusterID || topicID != meta.topicIDText() {
		return nil, outcome.Refused.Mark(fmt.Errorf("topic %q: %w: saved cluster id %q topic id %q, broker has cluster id %q topic id %q",
			topic, ErrIDsChanged, clusterID, topicID, meta.clusterID, meta.topicIDText()))
	}
	saved, err := parsePositions(raw)
	if err != nil {
		return nil, outcome.Refused.Mark(fmt.Errorf("topic %q: %w: %v", topic, ErrBadPositions, err))
	}
	savedKeys := make([]string, 0, len(saved))
	for k := range saved {
		savedKeys = append(savedKeys, k)
	}
	want := make([]string, len(meta.partitions))
	for i, p := range meta.partitions {
		want[i] = strconv.Itoa(int(p))
	}
	slices.SortFunc(savedKeys, byPartition)
	slices.SortFunc(want, byPartition)
	if !slices.Equal(savedKeys, want) {
		return nil, outcome.Refused.Mark(fmt.Errorf("topic %q: %w: saved partitions [%s], topic has [%s]",
			topic, ErrPartitionsChanged, strings.Join(savedKeys, " "), strings.Join(want, " ")))
	}
	out := make(Offsets, len(saved))
	for _, p := range meta.partitions {
		out[p] = saved[strconv.Itoa(int(p))]
	}
	return out, nil
}

// byPartition orders partition numbers written as text by number (a key
// that is not a number, in a positions row edited by hand, after them,
// as text).
func byPartition(a, b string) int {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	switch {
	case errA == nil && errB == nil:
		return cmp.Compare(x, y)
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return strings.Compare(a, b)
}

// errPositionsNow: a shard found no positions row, then one (another
// shard's first batch committed between the two reads): read it again.
var errPositionsNow = errors.New("a positions row appeared")

// noPositions is the seed's check of a topic without a positions row: no
// records either (nil: a first run). A shard asks both in one snapshot,
// and reads the row again when another shard's first batch committed it
// meanwhile.
func noPositions(ctx context.Context, tx pgx.Tx, topic string, shared bool) error {
	if !shared {
		var one int
		err := queryRow(ctx, tx, "look for records without positions", sqlAnyRecord, []any{topic}, &one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
	} else {
		var records, positions bool
		if err := queryRow(ctx, tx, "look for records without positions", sqlRecordsWithoutPositions, []any{topic}, &records, &positions); err != nil {
			return err
		}
		if positions {
			return errPositionsNow
		}
		if !records {
			return nil
		}
	}
	return outcome.Refused.Mark(fmt.Errorf("topic %q: %w in kafka_state.records but none in kafka_state.positions", topic, ErrValuesWithoutPositions))
}

// parsePositions reads next_offsets: a JSON object from partition (as a
// string) to an integer offset, written by the seed or by changesink. Like
// the seed's int(saved[str(p)]), a string holding an integer is accepted; a
// key that is not a partition number (decimal, no sign or leading zero) is not.
func parsePositions(raw []byte) (map[string]int64, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, fmt.Errorf("next_offsets is not a JSON object")
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		if n, err := strconv.ParseInt(k, 10, 32); err != nil || n < 0 || strconv.FormatInt(n, 10) != k {
			return nil, fmt.Errorf("next_offsets key %q is not a partition number", k)
		}
		var s string
		switch v := v.(type) {
		case json.Number:
			s = v.String()
		case string:
			s = strings.TrimSpace(v)
		default:
			return nil, fmt.Errorf("next_offsets[%q] is not an integer", k)
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("next_offsets[%q] = %s is not an integer", k, s)
		}
		out[k] = n
	}
	return out, nil
}
