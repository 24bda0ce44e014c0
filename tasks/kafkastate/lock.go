package kafkastate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/outcome"
)

// LockWait is how long a batch waits for the topic lock before it gives up.
// A run killed with SIGKILL keeps the lock until PostgreSQL notices its
// closed connection (at once for a backend waiting on the client, within
// about a second of a running statement on PostgreSQL 14+), so a run that
// starts right after it waits a little instead of failing.
const LockWait = 10 * time.Second

// lockPoll is how often the lock is tried again while waiting.
const lockPoll = 200 * time.Millisecond

// takeTopicLock takes the locks of a batch in tx, trying again for up to
// LockWait in all: for the whole topic the seed's per-topic advisory
// transaction lock; for a shard the same lock in shared mode (shards
// exclude whole-topic runs and the seed's, not each other), then the lock
// of each of its partitions (parts). When another session still holds one,
// the error (transient: nothing was changed, a retry succeeds once the
// holder ends) names that session.
func takeTopicLock(ctx context.Context, tx pgx.Tx, topic string, shard Shard, parts []int32) error {
	deadline := time.Now().Add(LockWait)
	if shard.Whole() {
		return takeLock(ctx, tx, topic, TopicLockKey(topic), false, deadline)
	}
	if err := takeLock(ctx, tx, topic, TopicLockKey(topic), true, deadline); err != nil {
		return err
	}
	for _, p := range parts {
		if err := takeLock(ctx, tx, topic, PartitionLockKey(topic, p), false, deadline); err != nil {
			return err
		}
	}
	return nil
}

// takeLock takes the advisory transaction lock key (shared or exclusive)
// in tx, trying again until deadline.
func takeLock(ctx context.Context, tx pgx.Tx, topic, key string, shared bool, deadline time.Time) error {
	try := sqlLock
	if shared {
		try = sqlLockShared
	}
	for {
		var locked bool
		if err := queryRow(ctx, tx, "take the topic lock", try, []any{key}, &locked); err != nil {
			return err
		}
		if locked {
			return nil
		}
		if !time.Now().Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return outcome.Transient.Mark(fmt.Errorf("topic %q: stopped while waiting for the topic lock: %w", topic, ctx.Err()))
		case <-time.After(lockPoll):
		}
	}
	return lockHeld(ctx, tx, topic, key, shared)
}

// lockHeld is the error of a lock still held after LockWait, naming the
// session that holds it (for a shared lock, the one holding it exclusively).
func lockHeld(ctx context.Context, tx pgx.Tx, topic, key string, shared bool) error {
	mode := ""
	if shared {
		mode = "ExclusiveLock"
	}
	holder := "a session that has ended meanwhile"
	var (
		pid                 int32
		app, client         string
		busy                backendBusy
		inTransactionForSec float64
	)
	err := queryRow(ctx, tx, "name the topic lock's holder", sqlLockHolder, []any{key, mode}, &pid, &app, &busy.state, &busy.waitType, &busy.wait, &client, &inTransactionForSec)
	switch {
	case err == nil:
		state := busy.activity()
		if busy.syncRep() {
			state += ": its COMMIT waits for a synchronous standby (synchronous_standby_names) to confirm it"
		}
		holder = fmt.Sprintf("PostgreSQL backend pid %d (application %q, %s, in its transaction for %.0f s, client %s)",
			pid, app, state, inTransactionForSec, client)
	case !errors.Is(err, pgx.ErrNoRows):
		return err
	}
	return outcome.Transient.Mark(fmt.Errorf("topic %q: %w (advisory lock hashtextextended('%s', 0)) after waiting %s: held by %s; nothing was changed",
		topic, ErrLocked, key, LockWait, holder))
}
