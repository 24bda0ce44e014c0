package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// poll reads the customers live view's highest id every interval and
// marks the commits it shows visible, as of the poll's start (ids rise
// with the rounds and customers are never deleted, so the highest id
// says which rounds a reader of the live view sees).
func (s *sustained) poll(ctx context.Context, db *sql.DB, view string, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		at := time.Now()
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var top int64
		err := db.QueryRowContext(qctx, "SELECT max(id) FROM "+view).Scan(&top)
		cancel()
		s.mu.Lock()
		if err != nil {
			if ctx.Err() == nil {
				s.pollErrors++
			}
		} else {
			for s.seen < len(s.commits) && s.commits[s.seen].lastID <= top {
				s.commits[s.seen].visible = at.Sub(s.commits[s.seen].at)
				s.seen++
			}
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sampleSlot records, every second, the slot's retained WAL and lag, the
// changes written so far and the age of the oldest commit not yet
// visible, and prints a line every 30 s.
func (s *sustained) sampleSlot(ctx context.Context, dsn, slot string) {
	conn, err := pgConnect(ctx, dsn)
	if err != nil {
		fmt.Println("bench-sync: the sampler cannot connect:", err)
		return
	}
	defer conn.Close(context.Background())
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		at := time.Now()
		smp := sample{at: at, retained: -1, lag: -1}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := conn.QueryRow(qctx, `SELECT (pg_current_wal_lsn() - restart_lsn)::bigint, (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint
			FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&smp.retained, &smp.lag)
		cancel()
		if err != nil && ctx.Err() == nil {
			fmt.Println("bench-sync: sampling the slot:", err)
		}
		s.mu.Lock()
		smp.written, smp.running, smp.commitsSeen, smp.all = s.written.total(), s.running, s.seen, len(s.commits)
		if s.seen < len(s.commits) {
			smp.oldestUnseen = at.Sub(s.commits[s.seen].at)
		}
		s.maxRetained = max(s.maxRetained, smp.retained)
		s.samples = append(s.samples, smp)
		n := len(s.samples)
		s.mu.Unlock()
		if n%30 == 0 {
			fmt.Printf("  %4d s: %8d changes written; oldest not visible %5.1f s ago; slot lag %6.1f MB, retained WAL %6.1f MB\n",
				n, smp.written, smp.oldestUnseen.Seconds(), mb(smp.lag), mb(smp.retained))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
