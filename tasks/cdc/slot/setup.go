package slot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// Setup says which publication and slot to make sure of.
type Setup struct {
	// Slot is the replication slot (required): created with pgoutput when
	// missing, checked when present, never dropped.
	Slot string
	// Publication is the publication (required): created when missing,
	// FOR TABLE Tables or, with AllTables, FOR ALL TABLES (which needs a
	// superuser); checked when present.
	Publication string
	// Tables are the tables to publish; exactly one of Tables and
	// AllTables.
	Tables    []Table
	AllTables bool
	// ExportSnapshot: when the slot is created, keep its exported snapshot
	// open for the initial load (SetupResult.Snapshot, which the caller
	// must Release). Default off.
	ExportSnapshot bool
	// ActiveWait: how long to wait for a slot another process streams from
	// (a consumer that just died) before refusing with ErrSlotActive.
	ActiveWait time.Duration
	// Log, when set, receives a line every WaitReport while the slot is
	// being created, naming the transactions the creation may wait for:
	// those holding a transaction ID, running (pid, state, age, database)
	// or prepared (gid, age, database), oldest first; and one when it is
	// made after such a wait. nil: Ensure logs nothing.
	Log *slog.Logger
	// WaitReport is how often (0: DefaultWaitReport).
	WaitReport time.Duration
}

func (s Setup) validate() error {
	if err := checkSlotName(s.Slot); err != nil {
		return err
	}
	if err := checkPublicationName(s.Publication); err != nil {
		return err
	}
	if s.AllTables == (len(s.Tables) > 0) {
		return configErr(fmt.Errorf("publication %s: %w: name the tables, or ask for all tables (not both)",
			s.Publication, ErrConfig))
	}
	for _, t := range s.Tables {
		if t.Schema == "" || t.Name == "" {
			return configErr(fmt.Errorf("publication %s: table %q: %w: want schema.table", s.Publication, t, ErrConfig))
		}
	}
	if s.ActiveWait < 0 || s.WaitReport < 0 {
		return configErr(fmt.Errorf("slot %s: %w: negative wait", s.Slot, ErrConfig))
	}
	return nil
}

// SetupResult is what Ensure found or made.
type SetupResult struct {
	PublicationCreated bool
	// TablesAdded are the tables of Setup.Tables the publication lacked,
	// which Ensure added to it.
	TablesAdded []Table
	SlotCreated bool
	// Snapshot is the new slot's exported snapshot (Setup.ExportSnapshot
	// and SlotCreated; else nil): Release it once the initial load has
	// imported it.
	Snapshot *Snapshot
	// ConsistentPoint is the new slot's starting position (SlotCreated).
	ConsistentPoint LSN
	// Tables are the tables the publication publishes now (partitions
	// for a partitioned table, unless it publishes via the root).
	Tables []PublishedTable
	// Health is the slot's state at the end.
	Health Health
}

// PublishedTable is one table of the publication.
type PublishedTable struct {
	Table
	// Identity is its replica identity (IdentityDefault, IdentityFull,
	// IdentityIndex; Ensure refuses IdentityNothing).
	Identity byte
}

// Ensure makes sure the publication and the slot exist and can be
// streamed: wal_level is logical, the role may replicate, every table has
// a usable replica identity, the publication publishes every operation of
// the tables asked for without filtering rows, and the slot is a pgoutput
// slot of this database that still has its WAL and that nobody else
// streams from. It creates what is missing — the publication before the
// slot, which must not predate it — and never drops anything.
func Ensure(ctx context.Context, pg *pgconn.Config, s Setup) (*SetupResult, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	conn, err := connect(ctx, pg, false)
	if err != nil {
		return nil, err
	}
	defer closeConn(conn)
	srv, err := readServer(ctx, conn)
	if err != nil {
		return nil, err
	}
	if err := srv.check(); err != nil {
		return nil, err
	}
	if err := checkTables(ctx, conn, s.Publication, s.Tables); err != nil {
		return nil, err
	}
	if err := checkSlotBeforePublication(ctx, conn, s); err != nil {
		return nil, err
	}
	res := &SetupResult{}
	if res.PublicationCreated, res.TablesAdded, err = ensurePublication(ctx, conn, s); err != nil {
		return nil, err
	}
	if res.Tables, err = publishedTables(ctx, conn, s.Publication); err != nil {
		return nil, err
	}
	if res.Snapshot, err = ensureSlot(ctx, conn, pg, s, srv); err != nil {
		return nil, err
	}
	if res.Snapshot != nil {
		res.SlotCreated, res.ConsistentPoint = true, res.Snapshot.ConsistentPoint
		if !s.ExportSnapshot {
			res.Snapshot = nil
		}
	}
	if res.Health, err = ReadHealth(ctx, conn, s.Slot); err != nil {
		res.Snapshot.release()
		return nil, err
	}
	return res, nil
}

// checkSlotBeforePublication refuses a slot whose publication is missing:
// the publication must predate every change the slot will decode.
func checkSlotBeforePublication(ctx context.Context, conn *pgconn.PgConn, s Setup) error {
	h, err := ReadHealth(ctx, conn, s.Slot)
	if errors.Is(err, ErrSlotMissing) {
		return nil
	} else if err != nil {
		return err
	}
	if err := h.refusal(); err != nil && !errors.Is(err, ErrSlotActive) {
		return err // the slot's own refusal says more (ensureSlot waits for an active one)
	}
	err = checkPublications(ctx, conn, []string{s.Publication})
	if errors.Is(err, ErrPublicationMissing) {
		return refused(&SlotError{Slot: s.Slot, Err: fmt.Errorf("%w (%s)", ErrSlotWithoutPublication, s.Publication)})
	}
	return err
}

// release is Release on a Snapshot that may be nil.
func (s *Snapshot) release() {
	if s != nil {
		s.Release()
	}
}

// ensureSlot checks the slot, or creates it when missing (returning its
// snapshot, exported or not; nil when it existed).
func ensureSlot(ctx context.Context, conn *pgconn.PgConn, pg *pgconn.Config, s Setup, srv server) (*Snapshot, error) {
	until := time.Now().Add(s.ActiveWait)
	for {
		h, err := ReadHealth(ctx, conn, s.Slot)
		if errors.Is(err, ErrSlotMissing) {
			if err := srv.checkRoom(s.Slot); err != nil {
				return nil, err
			}
			report := waitReport{log: s.Log, every: s.WaitReport, slot: s.Slot, user: srv.user, conn: conn}
			snap, err := report.create(ctx, func() (*Snapshot, error) { return createSlot(ctx, pg, s.Slot, s.ExportSnapshot) })
			if pgCode(err) == pgerrcode.DuplicateObject { //: created meanwhile by another setup
				continue
			}
			return snap, err
		}
		if err != nil {
			return nil, err
		}
		err = h.refusal()
		if err == nil || !errors.Is(err, ErrSlotActive) || time.Now().After(until) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
