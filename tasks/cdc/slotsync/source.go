package slotsync

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/applier"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/pgvalue"
	"github.com/changesink/changesink/tasks/cdc/slot"
)

// openSource connects to the source: a plain connection for the catalog
// and the source's identity, and the slot's stream from its confirmed
// position, under the settings the values are read with (pgvalue).
func (r *syncRun) openSource(ctx context.Context) error {
	// The catalog's missing values print under the settings too (shape.go).
	cfg := r.cfg.source.Copy()
	maps.Copy(cfg.RuntimeParams, pgvalue.Settings())
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return sourceErr(fmt.Errorf("connect to the source: %w", err))
	}
	r.conn = conn
	if r.systemID, r.source, err = systemIdentity(ctx, conn); err != nil {
		return sourceErr(err)
	}
	if err := r.openStream(ctx); err != nil {
		return err
	}
	r.startedAt = r.stream.Confirmed()
	return nil
}

// openStream starts the slot's stream from its confirmed position; the
// first transaction's commit floor is that position.
func (r *syncRun) openStream(ctx context.Context) error {
	pg := r.cfg.source.Config.Copy()
	if pg.RuntimeParams == nil {
		pg.RuntimeParams = map[string]string{}
	}
	maps.Copy(pg.RuntimeParams, pgvalue.Settings())
	var err error
	r.stream, err = slot.Start(ctx, pg, slot.StreamConfig{Slot: r.cfg.Slot, Publications: []string{r.cfg.Publication},
		IdleTimeout: idleWait, ActiveWait: activeWait, Settings: pgvalue.CheckedSettings,
		CheckSettings: func(got map[string]string) error {
			if err := pgvalue.CheckSettings(got); err != nil {
				return outcome.Config.Mark(err)
			}
			return nil
		}})
	if err != nil {
		r.stream = nil
		return err
	}
	// A new stream decodes again from the confirmed position: what an
	// earlier one of the run said it had decoded (seen) says nothing of
	// it, and would count the run caught up before it reads again what it
	// left (restartAt).
	r.f.floor, r.seen = uint64(r.stream.Confirmed()), 0
	for _, t := range r.order {
		t.followedHere = false
	}
	if r.last != nil {
		// A lost confirm: the transactions up to the ledger's position
		// come again and are skipped (applied); the next is above them.
		r.f.floor = max(r.f.floor, r.last.Through)
	}
	return nil
}

// closeStream ends the slot's stream (confirming nothing more), for a
// resync the run makes before it reads on (reopen).
func (r *syncRun) closeStream() {
	if r.stream != nil {
		r.stream.Close()
		r.stream = nil
	}
}

// reopen starts the stream again after a resync, from the slot's
// confirmed position, unless the run's budget has ended: then the run
// ends there.
func (r *syncRun) reopen(ctx context.Context) error {
	if time.Since(r.start) >= r.cfg.MaxDuration {
		r.done, r.why = true, fmt.Sprintf("%s %s reached", EnvMaxDuration, r.cfg.MaxDuration)
		return nil
	}
	r.stop.Step = applier.StepOpen
	return r.openStream(ctx)
}

// markEnd reads the WAL's end as the run begins to stream (after its
// locks and checks, which may wait): the run is caught up once it has
// everything before it.
func (r *syncRun) markEnd(ctx context.Context) error {
	var end string
	if err := r.conn.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&end); err != nil {
		return sourceErr(fmt.Errorf("read the source's WAL position: %w", err))
	}
	var err error
	if r.caughtUpAt, err = pglogrepl.ParseLSN(end); err != nil {
		return fmt.Errorf("read the source's WAL position %q: %w", end, err)
	}
	return nil
}

// activeWait is how long a run waits for a slot another process still
// streams from (a run killed a moment ago, whose walsender has not yet
// noticed) before it refuses.
const activeWait = 15 * time.Second

// closeSource closes the stream (confirming nothing more) and the
// catalog's connection.
func (r *syncRun) closeSource() {
	if r.stream != nil {
		r.stream.Close()
	}
	if r.conn != nil {
		_ = r.conn.Close(context.WithoutCancel(context.Background()))
	}
}

// sourceErr classes an error of the source's plain connection: outcome
// knows PostgreSQL's transient failures; a refused login is configuration.
func sourceErr(err error) error {
	if outcome.Classify(err) == outcome.Transient {
		return err
	}
	return outcome.Config.Mark(fmt.Errorf("%w: %w", change.ErrConfig, err))
}
