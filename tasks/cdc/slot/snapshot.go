package slot

import (
	"context"
	"fmt"
	"regexp"
	"sync"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Snapshot is the snapshot a new slot exported: the database exactly as of
// the slot's consistent point. Every transaction that commits after
// ConsistentPoint is streamed from the slot, every one before is in the
// snapshot, none is in both. It stays importable while the replication
// connection that created the slot stays open and idle, that is until
// Release; readers import it with Begin, from as many connections (and
// goroutines) as they like.
type Snapshot struct {
	// Slot is the slot created with it.
	Slot string
	// Name is the exported snapshot's identifier (pg_export_snapshot's
	// form), for SET TRANSACTION SNAPSHOT.
	Name string
	// ConsistentPoint is the slot's starting position: a row version
	// loaded from the snapshot is older than every change streamed.
	ConsistentPoint LSN

	mu   sync.Mutex
	conn *pgconn.PgConn // nil once released
}

// snapshotName is the form of an exported snapshot's name
// ("00000003-00000002-1"), checked before it is written into SQL.
var snapshotName = regexp.MustCompile(`^[0-9A-F]+(-[0-9A-F]+)+$`)

// Begin starts a REPEATABLE READ, READ ONLY transaction on conn that sees
// the snapshot: the caller reads (SELECT, COPY) and commits or rolls it
// back. It fails with ErrSnapshotReleased after Release.
func (s *Snapshot) Begin(ctx context.Context, conn *pgx.Conn) (pgx.Tx, error) {
	s.mu.Lock()
	released := s.conn == nil
	s.mu.Unlock()
	if released {
		return nil, internal(fmt.Errorf("slot %s: snapshot %s: %w", s.Slot, s.Name, ErrSnapshotReleased))
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("slot %s: begin a transaction for snapshot %s: %w", s.Slot, s.Name, err)
	}
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(s.Name)); err != nil {
		_ = tx.Rollback(ctx)
		return nil, fmt.Errorf("slot %s: import snapshot %s: %w", s.Slot, s.Name, err)
	}
	return tx, nil
}

// Release ends the snapshot: the replication connection that holds it is
// closed (transactions that imported it keep seeing it until they end).
// The slot stays. Calling it again does nothing.
func (s *Snapshot) Release() {
	s.mu.Lock()
	conn := s.conn
	s.conn = nil
	s.mu.Unlock()
	if conn != nil {
		closeConn(conn)
	}
}

// createSlot creates the slot with pgoutput on a replication connection.
// With export, the connection is kept, idle, and holds the exported
// snapshot returned; without, it is closed and only the consistent point
// is returned. The server waits for the transactions running at the time
// to end before the slot is consistent: ctx bounds that wait.
func createSlot(ctx context.Context, pg *pgconn.Config, slot string, export bool) (*Snapshot, error) {
	conn, err := connect(ctx, pg, true)
	if err != nil {
		return nil, err
	}
	action := "NOEXPORT_SNAPSHOT"
	if export {
		action = "EXPORT_SNAPSHOT"
	}
	res, err := pglogrepl.ParseCreateReplicationSlot(conn.Exec(ctx,
		"CREATE_REPLICATION_SLOT "+slot+" LOGICAL pgoutput "+action))
	if err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("slot %s: create: %w", slot, err)
	}
	point, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err == nil && export && !snapshotName.MatchString(res.SnapshotName) {
		err = fmt.Errorf("exported snapshot name %q", res.SnapshotName)
	}
	if err != nil {
		closeConn(conn)
		return nil, internal(fmt.Errorf("slot %s: create: %w: %w", slot, ErrProtocol, err))
	}
	s := &Snapshot{Slot: slot, ConsistentPoint: point}
	if export {
		s.Name, s.conn = res.SnapshotName, conn
	} else {
		closeConn(conn)
	}
	return s, nil
}
