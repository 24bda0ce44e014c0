package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// write commits the bench's rounds (see round) of txChanges changes each,
// paced at rate changes a second, for d: round r is due at
// start + r·txChanges/rate and starts then, or at once when the writer is
// behind (it catches up; how far behind it fell is recorded). A round's
// statements go in one batch, one implicit transaction, one round trip;
// its commit time is when the server's answer arrived.
func (s *sustained) write(ctx context.Context, dsn string, rate, txChanges int, d time.Duration) error {
	conn, err := pgConnect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	walStart, err := walPosition(ctx, conn)
	if err != nil {
		return err
	}
	k := max(txChanges/10, 1)
	every := time.Duration(float64(time.Second) * float64(k*10) / float64(rate))
	for r := 0; ; r++ {
		due := s.start.Add(time.Duration(r) * every)
		if due.Sub(s.start) >= d {
			break
		}
		if err := sleepCtx(ctx, time.Until(due)); err != nil {
			return err
		}
		late := time.Since(due)
		c, err := writeRound(ctx, conn, r, k)
		if err != nil {
			return err
		}
		at := time.Now()
		s.mu.Lock()
		s.late = max(s.late, late)
		s.written.inserts += c.inserts
		s.written.updates += c.updates
		s.written.deletes += c.deletes
		s.written.transactions++
		s.commits = append(s.commits, commit{at: at, lastID: int64(r+1) * int64(k), changes: c.total(), visible: -1})
		s.mu.Unlock()
	}
	walEnd, err := walPosition(ctx, conn)
	s.mu.Lock()
	s.writerDone, s.walWritten = time.Now(), walEnd-walStart
	s.mu.Unlock()
	return err
}

// walPosition is the server's current WAL position in bytes.
func walPosition(ctx context.Context, conn *pgx.Conn) (int64, error) {
	var pos int64
	err := conn.QueryRow(ctx, "SELECT (pg_current_wal_lsn() - '0/0')::bigint").Scan(&pos)
	return pos, err
}

// writeRound runs round r's statements (k customers per round) in one
// batch: an implicit transaction, committed when the batch's answer comes.
func writeRound(ctx context.Context, conn *pgx.Conn, r, k int) (counts, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var batch pgx.Batch
	for _, st := range round {
		if r >= st.first {
			batch.Queue(st.sql, r, k)
		}
	}
	br := conn.SendBatch(cctx, &batch)
	var c counts
	for range batch.Len() {
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return c, fmt.Errorf("round %d: %w", r, err)
		}
		switch {
		case tag.Insert():
			c.inserts += tag.RowsAffected()
		case tag.Update():
			c.updates += tag.RowsAffected()
		case tag.Delete():
			c.deletes += tag.RowsAffected()
		}
	}
	if err := br.Close(); err != nil {
		return c, fmt.Errorf("round %d: %w", r, err)
	}
	return c, nil
}
