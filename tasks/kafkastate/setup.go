package kafkastate

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
)

// SetupResult reports a finished setup.
type SetupResult struct {
	// Schema is always "kafka_state".
	Schema string
}

// Outputs returns {"schema": "kafka_state"}.
func (r *SetupResult) Outputs() map[string]any { return map[string]any{"schema": r.Schema} }

// Metrics returns none.
func (r *SetupResult) Metrics() []kestra.Metric { return nil }

// setupAttempts bounds the retries of a catalog race with a concurrent
// seed run (which takes no lock).
const setupAttempts = 5

// Setup creates schema kafka_state with the seed's DDL (CREATE SCHEMA/TABLE
// IF NOT EXISTS, CREATE OR REPLACE VIEW) and changesink's own tables
// (shards, rejected), so it is idempotent and leaves the seed's tables of a
// database the seed already set up as they are, adding changesink's. It runs in one transaction
// under an advisory lock, so concurrent changesink setups serialise; a
// catalog race with a concurrent seed run (unique violation on pg_namespace
// or pg_type, duplicate object, "tuple concurrently updated") is retried.
func Setup(ctx context.Context, pg Postgres) (*SetupResult, error) {
	conn, err := pg.open(ctx)
	if err != nil {
		return nil, err
	}
	defer closeConn(conn)
	if err := requireUTF8(conn); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		err := setupOnce(ctx, conn)
		if err == nil {
			return &SetupResult{Schema: "kafka_state"}, nil
		}
		if attempt == setupAttempts || !isCatalogRace(err) || ctx.Err() != nil {
			return nil, err
		}
	}
}

func setupOnce(ctx context.Context, conn *pgx.Conn) error {
	tx, err := begin(ctx, conn)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if err := execSQL(ctx, tx, "set statement_timeout", sqlStatementTimeout); err != nil {
		return err
	}
	if err := execSQL(ctx, tx, "take the setup lock", sqlSetupLock, setupLockKey); err != nil {
		return err
	}
	for _, stmt := range append(slices.Clip(ddl), shardsDDL, rejectedDDL) {
		if err := execSQL(ctx, tx, "create schema kafka_state", stmt); err != nil {
			return err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, pgTimeout)
	defer cancel()
	if err := tx.Commit(cctx); err != nil {
		var pe *pgconn.PgError
		if !errors.As(err, &pe) {
			// No answer: the server may have committed. A COMMIT that got
			// none within pgTimeout most often waits for a synchronous
			// standby, and pgx's cancel request on close then commits it on
			// this server alone (setup sends no cancelGate: a waiting DDL
			// COMMIT would keep its locks on the schema).
			return outcome.Transient.Mark(&PGError{Op: "commit schema kafka_state", Err: err, Cause: ErrSetupInDoubt})
		}
		return pgErr(ctx, err, "commit schema kafka_state")
	}
	return nil
}

// isCatalogRace reports the errors two concurrent CREATE ... IF NOT EXISTS
// or CREATE OR REPLACE VIEW statements can raise: a duplicate (a unique
// violation on pg_namespace_nspname_index or pg_type_typname_nsp_index, a
// duplicate schema, table or object) or an internal error ("tuple
// concurrently updated", CREATE OR REPLACE VIEW).
func isCatalogRace(err error) bool {
	state, _ := sqlstateOf(err)
	return state == stateDuplicate || state == stateInternal
}
