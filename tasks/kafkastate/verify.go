package kafkastate

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
)

// VerifyResult reports a topic whose stored records are all covered by
// their partitions' durable next offsets.
type VerifyResult struct {
	Topic string
	// HasPositions is false when the topic has no positions row: nothing was
	// ever materialized for it (or TOPIC is misspelt). The check passes, as
	// the seed's does, but the command warns.
	HasPositions bool
	// Ahead is the first record ahead of its durable position, when the
	// caller reports the check's failure instead of refusing (Verify itself
	// never returns a result with Ahead set).
	Ahead *AheadError
	// Rejected counts the topic's rows in kafka_state.rejected: records
	// ON_BAD_RECORD=reject kept aside (0 when the table does not exist).
	Rejected int64
}

// Outputs returns {"topic": ..., "valid": ...}: the seed's
// check_saved_positions row.valid, false only when Ahead is set; and
// rejected (Rejected) when the topic has rejected records.
func (r *VerifyResult) Outputs() map[string]any {
	out := map[string]any{"topic": r.Topic, "valid": r.Ahead == nil}
	if r.Rejected > 0 {
		out["rejected"] = r.Rejected
	}
	return out
}

// Metrics returns none.
func (r *VerifyResult) Metrics() []kestra.Metric { return nil }

// Verify is the seed's check_saved_positions query and its Fail task in
// one: it refuses (ErrAheadOfPositions, as an *AheadError naming the topic,
// key, partition, offset and saved next offset of the first offending
// record, and how many there are) when a stored record of topic has no
// positions row, no entry for its partition, or an offset at or past its
// partition's saved next offset; it counts the topic's rejected records
// (VerifyResult.Rejected). A next offset that is not an integer is
// refused with ErrBadPositions, as Materialize does, and so is a positions
// row that is not {"<partition>": <next offset>} (a null offset, an array, a
// key that is not a partition number), which the seed's query lets pass.
// It reads only; it takes no lock.
func Verify(ctx context.Context, pg Postgres, topic string) (*VerifyResult, error) {
	if err := ValidateTopic(topic); err != nil {
		return nil, err
	}
	conn, err := pg.open(ctx)
	if err != nil {
		return nil, err
	}
	defer closeConn(conn)
	if err := checkSavedPositions(ctx, conn, topic); err != nil {
		return nil, err
	}
	var (
		e     AheadError
		next  *int64
		count int64
	)
	e.Topic = topic
	err = queryRow(ctx, conn, "check saved positions", sqlVerify, []any{topic}, &e.Key, &e.Partition, &e.Offset, &next, &count)
	if errors.Is(err, pgx.ErrNoRows) {
		res := &VerifyResult{Topic: topic}
		if err := queryRow(ctx, conn, "look for saved positions", sqlHasPositions, []any{topic}, &res.HasPositions); err != nil {
			return nil, err
		}
		if res.Rejected, err = countRejected(ctx, conn, topic); err != nil {
			return nil, err
		}
		return res, nil
	}
	if state, pe := sqlstateOf(err); state == stateNotAnInteger {
		// The cast of a next offset to bigint failed: materialize refuses
		// the same row with ErrBadPositions.
		return nil, outcome.Refused.Mark(fmt.Errorf("topic %q: %w: a next offset in next_offsets is not an integer (%s)",
			topic, ErrBadPositions, pe.Message))
	}
	if err != nil {
		return nil, err
	}
	e.Next = -1
	if next != nil {
		e.Next = *next
	}
	return nil, outcome.Refused.Mark(fmt.Errorf("%w (%d such records)", &e, count))
}

// checkSavedPositions refuses (ErrBadPositions) a positions row of topic
// that Materialize could not read: next_offsets must be an object from
// partition numbers to integer offsets (parsePositions). Without it the
// seed's query passes such a row: a null offset or a non-object casts to
// NULL, which no comparison fails.
func checkSavedPositions(ctx context.Context, conn *pgx.Conn, topic string) error {
	var raw []byte
	err := queryRow(ctx, conn, "read kafka_state.positions", sqlSavedOffsets, []any{topic}, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := parsePositions(raw); err != nil {
		return outcome.Refused.Mark(fmt.Errorf("topic %q: %w: %v", topic, ErrBadPositions, err))
	}
	return nil
}

// countRejected counts topic's rows in kafka_state.rejected, 0 when the
// table does not exist.
func countRejected(ctx context.Context, conn *pgx.Conn, topic string) (int64, error) {
	var (
		ok bool
		n  int64
	)
	if err := queryRow(ctx, conn, "look for kafka_state.rejected", sqlHasRejected, nil, &ok); err != nil || !ok {
		return 0, err
	}
	err := queryRow(ctx, conn, "count kafka_state.rejected", sqlCountRejected, []any{topic}, &n)
	return n, err
}
