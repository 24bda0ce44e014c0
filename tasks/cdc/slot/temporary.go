package slot

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// ExportTemporary creates a temporary pgoutput slot named name and
// returns its exported snapshot: the database exactly as of the temporary
// slot's consistent point, which sits on the same WAL as every other
// slot's stream. A transaction whose commit record starts before
// ConsistentPoint is in the snapshot, one at or after it is not: for a
// slot that streams from before that point, rows read under the snapshot
// and versioned at ConsistentPoint are newer than every change streamed
// before it and older than every change after it, once the stream's
// commit floor is raised to it.
//
// The server drops the temporary slot when its connection closes
// (Release, or the process's end); it holds back no WAL after that. It
// needs a free replication slot and WAL sender while it lives, and its
// creation waits for the transactions running at the time to end: ctx
// bounds that wait.
func ExportTemporary(ctx context.Context, pg *pgconn.Config, name string) (*Snapshot, error) {
	return ExportTemporaryLogged(ctx, pg, name, nil, 0)
}

// ExportTemporaryLogged is ExportTemporary that, with log set, logs every
// every (0: DefaultWaitReport) what the temporary slot's creation waits
// for, as Ensure does (Setup.Log), from a connection of its own.
func ExportTemporaryLogged(ctx context.Context, pg *pgconn.Config, name string, log *slog.Logger, every time.Duration) (*Snapshot, error) {
	if err := checkSlotName(name); err != nil {
		return nil, err
	}
	if every < 0 {
		return nil, configErr(fmt.Errorf("slot %s: %w: negative wait", name, ErrConfig))
	}
	report := waitReport{log: log, every: every, slot: name, user: pg.User, pg: pg}
	return report.create(ctx, func() (*Snapshot, error) { return exportTemporary(ctx, pg, name) })
}

// exportTemporary creates the temporary slot name and returns its
// exported snapshot (ExportTemporary).
func exportTemporary(ctx context.Context, pg *pgconn.Config, name string) (*Snapshot, error) {
	conn, err := connect(ctx, pg, true)
	if err != nil {
		return nil, err
	}
	res, err := pglogrepl.ParseCreateReplicationSlot(conn.Exec(ctx, "CREATE_REPLICATION_SLOT "+name+" TEMPORARY LOGICAL pgoutput EXPORT_SNAPSHOT"))
	if err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("slot %s: create a temporary slot: %w", name, err)
	}
	point, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err == nil && !snapshotName.MatchString(res.SnapshotName) {
		err = fmt.Errorf("exported snapshot name %q", res.SnapshotName)
	}
	if err != nil {
		closeConn(conn)
		return nil, internal(fmt.Errorf("slot %s: create a temporary slot: %w: %w", name, ErrProtocol, err))
	}
	return &Snapshot{Slot: name, Name: res.SnapshotName, ConsistentPoint: point, conn: conn}, nil
}
