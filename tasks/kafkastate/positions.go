package kafkastate

import (
	"bytes"
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
// connection, with its settings, and the topic lock.
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
	return takeTopicLock(ctx, b.tx, b.r.topic)
}

// readPositions is the rest of step 2: the saved positions, checked against
// the topic's metadata, and the tombstone rule's anchor (their updated_at,
// by PostgreSQL's clock).
func (b *batch) readPositions(ctx context.Context) error {
	topic := b.r.topic
	saved, err := readPositions(ctx, b.tx, topic, b.meta)
	if err != nil {
		return err
	}
	b.saved = saved
	b.rule = tombstoneRule{topic: topic, ret: b.r.ret, hasPositions: saved != nil}
	if saved != nil {
		var clock time.Time
		if err := queryRow(ctx, b.tx, "read kafka_state.positions.updated_at", sqlPositionsClock, []any{topic}, &b.rule.updatedAt, &clock); err != nil {
			return err
		}
		b.rule.sinceUpdated = clock.Sub(b.rule.updatedAt)
	}
	b.rule.checked = time.Now()
	b.ph.mark("lock+positions")
	return nil
}

// readPositions reads the saved positions FOR UPDATE and applies the seed's
// checks against the broker's metadata. It returns nil when there is no
// positions row (first run).
func readPositions(ctx context.Context, tx pgx.Tx, topic string, meta topicMeta) (Offsets, error) {
	var (
		raw                []byte
		clusterID, topicID string
	)
	qctx, cancel := context.WithTimeout(ctx, pgTimeout)
	err := tx.QueryRow(qctx, sqlReadPositions, topic).Scan(&raw, &clusterID, &topicID)
	cancel()
	if errors.Is(err, pgx.ErrNoRows) {
		var one int
		err := queryRow(ctx, tx, "look for records without positions", sqlAnyRecord, []any{topic}, &one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return nil, outcome.Refused.Mark(fmt.Errorf("topic %q: %w in kafka_state.records but none in kafka_state.positions",
			topic, ErrValuesWithoutPositions))
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
	slices.Sort(savedKeys)
	slices.Sort(want)
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
