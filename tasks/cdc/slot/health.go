package slot

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// Health is a replication slot's state as pg_replication_slots reports it,
// with the server's current WAL position read in the same statement: what
// a run prints as outputs and metrics, and what the refusals are decided on.
type Health struct {
	Slot string
	// Plugin is the output plugin ("pgoutput"); SlotType "logical" or
	// "physical"; Database the database it decodes ("" for physical).
	Plugin   string
	SlotType string
	Database string
	// InDatabase: the slot decodes the database this connection is in.
	InDatabase bool
	Temporary  bool
	// Active: a process streams from it now, ActivePID (0 when none).
	Active    bool
	ActivePID int32
	// WALStatus is "reserved", "extended", "unreserved" or "lost" (the
	// slot can no longer stream: the WAL it needs is gone).
	WALStatus string
	// SafeWALSize is how many more bytes of WAL can be written before the
	// slot is in danger of losing WAL (max_slot_wal_keep_size); -1 when
	// there is no limit (or the slot is already lost).
	SafeWALSize int64
	// Restart is the oldest WAL the slot retains (restart_lsn); Confirmed
	// the position its consumer confirmed (confirmed_flush_lsn): a restart
	// delivers the transactions that commit after it.
	Restart   LSN
	Confirmed LSN
	// Current is pg_current_wal_lsn().
	Current LSN
	// LagBytes is Current − Confirmed: WAL written since the last confirm
	// (an upper bound of what is still to be delivered).
	LagBytes int64
	// RetainedBytes is Current − Restart: WAL the server keeps for the slot.
	RetainedBytes int64
}

const healthSQL = `SELECT s.plugin, s.slot_type, coalesce(s.database, ''), coalesce(s.database = current_database(), false),
       s.temporary, s.active, coalesce(s.active_pid, 0), coalesce(s.wal_status, ''), coalesce(s.safe_wal_size, -1),
       coalesce(s.restart_lsn, '0/0'), coalesce(s.confirmed_flush_lsn, '0/0'), pg_current_wal_lsn()
  FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = `

// ReadHealth reads the slot's Health over conn (a plain or a replication
// connection: pgx users pass conn.PgConn()). A missing slot is ErrSlotMissing.
func ReadHealth(ctx context.Context, conn *pgconn.PgConn, slot string) (Health, error) {
	if err := checkSlotName(slot); err != nil {
		return Health{}, err
	}
	rows, err := simpleQuery(ctx, conn, healthSQL+quoteLiteral(slot))
	if err != nil {
		return Health{}, fmt.Errorf("read slot %s: %w", slot, err)
	}
	if len(rows) == 0 {
		return Health{}, configErr(&SlotError{Slot: slot, Err: ErrSlotMissing})
	}
	return parseHealth(slot, rows[0])
}

func parseHealth(slot string, r [][]byte) (Health, error) {
	h := Health{Slot: slot, Plugin: string(r[0]), SlotType: string(r[1]), Database: string(r[2]),
		InDatabase: string(r[3]) == "t", Temporary: string(r[4]) == "t", Active: string(r[5]) == "t",
		WALStatus: string(r[7])}
	pid, err1 := strconv.ParseInt(string(r[6]), 10, 32)
	safe, err2 := strconv.ParseInt(string(r[8]), 10, 64)
	restart, err3 := pglogrepl.ParseLSN(string(r[9]))
	confirmed, err4 := pglogrepl.ParseLSN(string(r[10]))
	current, err5 := pglogrepl.ParseLSN(string(r[11]))
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return h, fmt.Errorf("read slot %s: %w", slot, err)
	}
	h.ActivePID, h.SafeWALSize, h.Restart, h.Confirmed, h.Current = int32(pid), safe, restart, confirmed, current
	if confirmed != 0 && current > confirmed {
		h.LagBytes = int64(current - confirmed)
	}
	if restart != 0 && current > restart {
		h.RetainedBytes = int64(current - restart)
	}
	return h, nil
}

// refusal returns why the slot cannot be streamed from by this
// connection's database, or nil: another plugin or a physical slot, another
// database, lost WAL, or another process streaming from it.
func (h Health) refusal() error {
	e := &SlotError{Slot: h.Slot, Plugin: h.Plugin, Database: h.Database, PID: h.ActivePID,
		WALStatus: h.WALStatus, Restart: h.Restart, Confirmed: h.Confirmed}
	switch {
	case h.SlotType != "logical" || h.Plugin != "pgoutput":
		e.Err = ErrSlotPlugin
		if h.SlotType != "logical" {
			e.Plugin = h.SlotType
		}
		return refused(e)
	case !h.InDatabase:
		e.Err = ErrSlotDatabase
		return refused(e)
	case h.WALStatus == "lost":
		e.Err = ErrSlotLost
		return refused(e)
	case h.Active:
		e.Err = ErrSlotActive
		return transient(e)
	}
	return nil
}

// simpleQuery runs one statement with the simple protocol (the only one a
// replication connection speaks) and returns its rows, values in text, NULL
// as nil.
func simpleQuery(ctx context.Context, conn *pgconn.PgConn, sql string) ([][][]byte, error) {
	results, err := conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(results) == 0 {
		return nil, nil
	}
	last := results[len(results)-1]
	if last.Err != nil {
		return nil, last.Err
	}
	return last.Rows, nil
}
