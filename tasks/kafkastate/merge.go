package kafkastate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/changesink/changesink/internal/outcome"
)

// merge is step 5: the staged batch applied to kafka_state.records in one
// statement, after the moved-key query where MERGE cannot find such a key
// itself. A batch that read nothing has nothing to merge.
func (b *batch) merge(ctx context.Context) error {
	if b.consumed == 0 {
		return nil
	}
	tx, topic := b.tx, b.r.topic
	if err := execSQL(ctx, tx, "set default_statistics_target", sqlStatisticsTarget); err != nil {
		return err
	}
	if err := execSQL(ctx, tx, "analyze the staging table", sqlAnalyzeStaging); err != nil {
		return err
	}
	b.ph.mark("analyze")
	var pages int64
	if err := queryRow(ctx, tx, "size kafka_state.records", sqlRecordsPages, nil, &pages); err != nil {
		return err
	}
	byIndex := pages >= b.consumed/4
	if byIndex {
		if err := execSQL(ctx, tx, "set the planner to index lookups", sqlPlanner); err != nil {
			return err
		}
	}
	// MERGE refuses a key stored at another partition itself; a key read
	// from two partitions of this batch, or any moved key without MERGE,
	// takes the moved-key query.
	useMerge := supportsMerge(b.r.conn) && !b.r.env.hooks.onConflict
	if !useMerge || keysInTwoPartitions(b.states) {
		if err := checkMovedKeys(ctx, tx, topic); err != nil {
			return err
		}
		b.ph.mark("moved-keys")
	}
	if err := mergeBatch(ctx, tx, topic, mergeSQL(useMerge, repeatsKeys(b.states), byIndex), useMerge, b.parts, b.states); err != nil {
		return err
	}
	if byIndex {
		if err := execSQL(ctx, tx, "reset the planner", sqlPlannerReset); err != nil {
			return err
		}
	}
	b.ph.mark("merge")
	return nil
}

// supportsMerge reports whether the server has MERGE (PostgreSQL 15+), from
// the server_version the server reported at connect time.
func supportsMerge(conn *pgx.Conn) bool {
	v := conn.PgConn().ParameterStatus("server_version")
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(strings.TrimSpace(major))
	return err == nil && n >= 15
}

// keyTooLong is the refusal for a merge that PostgreSQL failed because an
// index row was too large: it names the batch's longest key (the first in
// partition order among equals), the one that cannot be indexed unless
// compression shrinks another below it.
func keyTooLong(topic string, partitions []int32, states map[int32]*partState, pe *pgconn.PgError) error {
	var at *partState
	for _, p := range partitions {
		if st := states[p]; at == nil || len(st.longestKey) > len(at.longestKey) {
			at = st
		}
	}
	return outcome.Refused.Mark(&RecordError{Topic: topic, Partition: at.partition, Offset: at.longestKeyAt, Key: []byte(at.longestKey), Err: ErrKeyTooLong,
		Detail: fmt.Sprintf("%d bytes, the longest key of the batch; PostgreSQL: %s", len(at.longestKey), pe.Message)})
}

// mergeBatch runs merge (a mergeSQL statement). With MERGE it runs under
// a savepoint: when the statement fails on a key stored at another
// partition (not_null_violation on record_key, see mergeSQL), it rolls back
// to the savepoint and returns the moved-key query's refusal. A key too
// large for the primary key index is refused naming the batch's longest key.
func mergeBatch(ctx context.Context, tx pgx.Tx, topic, merge string, useMerge bool, partitions []int32, states map[int32]*partState) error {
	db := tx
	if useMerge {
		bctx, cancel := context.WithTimeout(ctx, pgTimeout)
		sp, err := tx.Begin(bctx) // SAVEPOINT
		cancel()
		if err != nil {
			return pgErr(ctx, err, "savepoint before the merge")
		}
		db = sp
	}
	err := execSQL(ctx, db, "merge the batch into kafka_state.records", merge, topic)
	state, pe := sqlstateOf(err)
	switch {
	case err == nil && useMerge:
		cctx, cancel := context.WithTimeout(ctx, pgTimeout)
		defer cancel()
		if err := db.Commit(cctx); err != nil { // RELEASE SAVEPOINT
			return pgErr(ctx, err, "release the merge's savepoint")
		}
		return nil
	case err == nil:
		return nil
	case state == stateLimitExceeded: // an index row too large
		return keyTooLong(topic, partitions, states, pe)
	case useMerge && state == stateNotNull && pe.ColumnName == "record_key":
		rctx, cancel := context.WithTimeout(ctx, pgTimeout)
		rerr := db.Rollback(rctx) // ROLLBACK TO SAVEPOINT
		cancel()
		if rerr != nil {
			return pgErr(ctx, rerr, "roll back to the merge's savepoint")
		}
		if err := checkMovedKeys(ctx, tx, topic); err != nil {
			return err
		}
		return fmt.Errorf("topic %q: the merge found a key stored at another partition, but the moved-key query found none: %w", topic, err)
	}
	return err
}

// checkMovedKeys runs sqlMovedKey and refuses the batch if a key appears in
// two partitions.
func checkMovedKeys(ctx context.Context, tx pgx.Tx, topic string) error {
	var e MovedKeyError
	e.Topic = topic
	qctx, cancel := context.WithTimeout(ctx, pgTimeout)
	defer cancel()
	err := tx.QueryRow(qctx, sqlMovedKey, topic).Scan(&e.Key, &e.Partition, &e.Offset, &e.OtherPartition, &e.OtherOffset, &e.Stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return pgErr(ctx, err, "check for keys that moved partitions")
	}
	return outcome.Refused.Mark(&e)
}
