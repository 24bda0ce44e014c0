package slot

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// StreamConfig says which slot to stream and how.
type StreamConfig struct {
	// Slot is the replication slot (required).
	Slot string
	// Publications are the publications whose tables are streamed
	// (required; usually one).
	Publications []string
	// Messages: also deliver pg_logical_emit_message messages (pgoutput's
	// messages option), as KindMessage events. Default off.
	Messages bool
	// Binary: values in their types' binary send format (ValueBinary)
	// instead of text. Default off (text: exact for every type, and what
	// the mappings read).
	Binary bool
	// IdleTimeout: when positive, Next returns a KindIdle event once this
	// long passes between transactions without any of the publications'
	// data (keepalives do not count: the server sends them whenever other
	// tables or databases write). Zero: Next waits until a message arrives
	// or its context ends.
	IdleTimeout time.Duration
	// ActiveWait: how long Start waits for a slot that another process
	// streams from (a consumer that just died) before it gives up with
	// ErrSlotActive. Zero: it does not wait.
	ActiveWait time.Duration
	// Relations are the relations a previous Stream of this slot reported
	// (its Relations()), so that a resumed stream reports schema changes
	// against them. Optional.
	Relations map[uint32]*Relation
	// Settings, when set, are read with SHOW on the replication connection
	// before streaming starts (the walsender prints values under them),
	// and handed to CheckSettings, whose error Start returns.
	Settings      []string
	CheckSettings func(map[string]string) error
}

func (c StreamConfig) validate() error {
	if err := checkSlotName(c.Slot); err != nil {
		return err
	}
	if len(c.Publications) == 0 {
		return configErr(fmt.Errorf("stream slot %s: %w: no publication", c.Slot, ErrConfig))
	}
	for _, p := range c.Publications {
		if err := checkPublicationName(p); err != nil {
			return err
		}
	}
	if c.IdleTimeout < 0 || c.ActiveWait < 0 {
		return configErr(fmt.Errorf("stream slot %s: %w: negative duration", c.Slot, ErrConfig))
	}
	return nil
}

// Stream reads a slot's changes: whole committed transactions in commit
// order, as Events. It is not safe for concurrent use; one goroutine calls
// Next, Confirm, Heartbeat and Close.
//
// The server times a stream out when it hears nothing from it for
// wal_sender_timeout (one minute by default): call Next, Confirm or
// Heartbeat at least every half of that, also while a batch is being
// applied.
type Stream struct {
	conn   *pgconn.PgConn
	netc   net.Conn
	cfg    StreamConfig
	rels   map[uint32]*Relation
	ev     Event
	msg    message
	err    error // sticky: the stream is over
	closed bool

	inTx       bool
	lastCommit LSN // the last commit delivered
	lastEnd    LSN // its end
	confirmed  LSN // what was last confirmed to the server
	idle       LSN // the last keepalive's WAL end seen between transactions

	watched  context.Context
	unwatch  func() bool
	deadline time.Time // the read deadline set on netc, when armed
	armed    bool
	lastMsg  time.Time
}

// Start opens a replication connection and starts streaming the slot from
// its confirmed position (confirmed_flush_lsn): the first transaction
// delivered is the first that commits after it. It refuses a slot that is
// missing, lost, of another plugin or database, or in use (after waiting
// ActiveWait), and a publication that does not exist.
func Start(ctx context.Context, pg *pgconn.Config, cfg StreamConfig) (*Stream, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	conn, err := connect(ctx, pg, true)
	if err != nil {
		return nil, err
	}
	if err := checkSettings(ctx, conn, cfg); err != nil {
		closeConn(conn)
		return nil, err
	}
	h, err := startWaiting(ctx, conn, cfg)
	if err != nil {
		closeConn(conn)
		return nil, err
	}
	s := &Stream{conn: conn, netc: conn.Conn(), cfg: cfg, rels: make(map[uint32]*Relation), confirmed: h.Confirmed,
		lastEnd: h.Confirmed, lastMsg: time.Now()}
	for id, r := range cfg.Relations {
		s.rels[id] = r
	}
	return s, nil
}

// checkSettings reads cfg.Settings with SHOW and hands them to
// cfg.CheckSettings.
func checkSettings(ctx context.Context, conn *pgconn.PgConn, cfg StreamConfig) error {
	if cfg.CheckSettings == nil {
		return nil
	}
	got := make(map[string]string, len(cfg.Settings))
	for _, name := range cfg.Settings {
		if strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_") != "" {
			return configErr(fmt.Errorf("%w: setting %q is not a setting's name", ErrConfig, name))
		}
		rows, err := simpleQuery(ctx, conn, "SHOW "+name)
		if err != nil {
			return fmt.Errorf("read the replication connection's setting %s: %w", name, err)
		}
		if len(rows) == 1 && len(rows[0]) == 1 {
			got[name] = string(rows[0][0])
		}
	}
	return cfg.CheckSettings(got)
}

// startWaiting checks the slot and the publications and starts streaming,
// waiting up to cfg.ActiveWait while another process streams from the
// slot (also when it takes the slot between the check and the start).
// It returns the slot's state as checked.
func startWaiting(ctx context.Context, conn *pgconn.PgConn, cfg StreamConfig) (Health, error) {
	until := time.Now().Add(cfg.ActiveWait)
	for {
		h, err := ReadHealth(ctx, conn, cfg.Slot)
		if err == nil {
			err = h.refusal()
		}
		if err == nil {
			if err = checkPublications(ctx, conn, cfg.Publications); err != nil {
				return h, err
			}
			err = startReplication(ctx, conn, cfg)
		}
		if err == nil || !errors.Is(err, ErrSlotActive) || time.Now().After(until) {
			return h, err
		}
		select {
		case <-ctx.Done():
			return h, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func checkPublications(ctx context.Context, conn *pgconn.PgConn, pubs []string) error {
	quoted := make([]string, len(pubs))
	for i, p := range pubs {
		quoted[i] = quoteLiteral(p)
	}
	rows, err := simpleQuery(ctx, conn, "SELECT pubname, pubviaroot FROM pg_catalog.pg_publication WHERE pubname IN ("+
		strings.Join(quoted, ", ")+")")
	if err != nil {
		return fmt.Errorf("read publications: %w", err)
	}
	found := map[string]bool{}
	for _, r := range rows {
		found[string(r[0])] = true
		if string(r[1]) == "t" {
			return refused(fmt.Errorf("publication %s: %w", r[0], ErrPublicationViaRoot))
		}
	}
	for _, p := range pubs {
		if !found[p] {
			return configErr(fmt.Errorf("publication %s: %w", p, ErrPublicationMissing))
		}
	}
	return nil
}

// startReplication sends START_REPLICATION from the slot's confirmed
// position (0/0 asks the server for it) with pgoutput's options, and
// reads the answer up to the copy mode. A refusal is read to its end, so
// the connection can still say why: the slot's state, read again, names the
// cause (lost or taken between the check and the start) when it has one.
func startReplication(ctx context.Context, conn *pgconn.PgConn, cfg StreamConfig) error {
	args := []string{"proto_version '1'", "publication_names " + quoteLiteral(strings.Join(cfg.Publications, ","))}
	if cfg.Messages {
		args = append(args, "messages 'true'")
	}
	if cfg.Binary {
		args = append(args, "binary 'true'")
	}
	sql := "START_REPLICATION SLOT " + cfg.Slot + " LOGICAL 0/0 (" + strings.Join(args, ", ") + ")"
	conn.Frontend().SendQuery(&pgproto3.Query{String: sql})
	if err := conn.Frontend().Flush(); err != nil {
		return transient(fmt.Errorf("slot %s: start replication: %w: %w", cfg.Slot, ErrConnLost, err))
	}
	var refusal error
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return transient(fmt.Errorf("slot %s: start replication: %w: %w", cfg.Slot, ErrConnLost, err))
		}
		switch m := msg.(type) {
		case *pgproto3.CopyBothResponse:
			return nil
		case *pgproto3.ErrorResponse:
			refusal = pgconn.ErrorResponseToPgError(m)
		case *pgproto3.ReadyForQuery:
			if refusal == nil {
				return internal(fmt.Errorf("slot %s: start replication: %w: no copy mode", cfg.Slot, ErrProtocol))
			}
			return startRefusal(ctx, conn, cfg.Slot, refusal)
		}
	}
}

// startRefusal explains a refused START_REPLICATION by the slot's state
// when that refuses it, else by the server's error.
func startRefusal(ctx context.Context, conn *pgconn.PgConn, slot string, refusal error) error {
	if h, err := ReadHealth(ctx, conn, slot); err != nil {
		if errors.Is(err, ErrSlotMissing) {
			return err
		}
	} else if err := h.refusal(); err != nil {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(refusal, &pgErr) && pgErr.Code == pgerrcode.InsufficientPrivilege {
		return configErr(fmt.Errorf("slot %s: start replication: %w: %w", slot, ErrNoReplication, refusal))
	}
	return fmt.Errorf("slot %s: start replication: %w", slot, refusal)
}

// Relations returns the relations the stream has reported, by ID: pass
// them to the next Stream of the slot (StreamConfig.Relations).
func (s *Stream) Relations() map[uint32]*Relation {
	out := make(map[uint32]*Relation, len(s.rels))
	for id, r := range s.rels {
		out[id] = r
	}
	return out
}

// Confirmed returns the position last confirmed to the server.
func (s *Stream) Confirmed() LSN { return s.confirmed }

// Next returns the next event, waiting for one until ctx ends (or, between
// transactions, until StreamConfig.IdleTimeout passes without data: a
// KindIdle event).
// The Event is reused: it is valid until the next call.
//
// When ctx ends, Next returns its error and the stream stays usable. Any
// other error ends the stream: ErrConnLost (transient) when the
// connection dropped, a slot or publication refusal, or ErrProtocol. The
// transaction that was open is then incomplete: discard it and start a
// new Stream, which resumes from the confirmed position.
//
// For speed, pass the same ctx to successive calls (a new ctx costs a
// watch of its own) and let IdleTimeout, not a per-call deadline, detect
// a quiet slot.
func (s *Stream) Next(ctx context.Context) (*Event, error) {
	if s.err != nil {
		return nil, s.err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("slot %s: wait for changes: %w", s.cfg.Slot, err)
	}
	s.watch(ctx)
	for {
		s.arm(ctx)
		msg, err := s.conn.ReceiveMessage(context.Background())
		if err != nil {
			if !pgconn.Timeout(err) || s.conn.IsClosed() {
				return nil, s.fail(err)
			}
			s.armed = false // the deadline passed, or a stale watch fired: re-arm
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("slot %s: wait for changes: %w", s.cfg.Slot, err)
			}
			if s.cfg.IdleTimeout > 0 && !s.inTx && time.Since(s.lastMsg) >= s.cfg.IdleTimeout {
				s.lastMsg = time.Now()
				s.ev = Event{Kind: KindIdle}
				return &s.ev, nil
			}
			continue
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			return nil, s.fail(unexpected(msg))
		}
		if s.cfg.IdleTimeout > 0 && len(cd.Data) > 0 && cd.Data[0] == pglogrepl.XLogDataByteID {
			s.lastMsg = time.Now() // keepalives do not count: a server busy elsewhere sends them all the time
		}
		ev, err := s.handle(ctx, cd.Data)
		if err != nil {
			return nil, s.fail(err)
		}
		if ev != nil {
			return ev, nil
		}
	}
}

// unexpected turns a message other than CopyData into an error: the
// server's error, or the end of the stream.
func unexpected(msg pgproto3.BackendMessage) error {
	switch m := msg.(type) {
	case *pgproto3.ErrorResponse:
		return pgconn.ErrorResponseToPgError(m)
	case *pgproto3.CopyDone, *pgproto3.CommandComplete, *pgproto3.ReadyForQuery:
		return fmt.Errorf("%w: the server ended the stream (%T)", ErrConnLost, msg)
	}
	return fmt.Errorf("%w: a %T message in the replication stream", ErrProtocol, msg)
}

// handle processes one CopyData message: an event to return, or nil for
// one handled here (a keepalive inside a transaction).
func (s *Stream) handle(ctx context.Context, data []byte) (*Event, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty CopyData message", ErrProtocol)
	}
	switch data[0] {
	case pglogrepl.XLogDataByteID:
		if len(data) < 25 {
			return nil, fmt.Errorf("%w: XLogData of %d bytes", ErrProtocol, len(data))
		}
		start := LSN(binary.BigEndian.Uint64(data[1:]))
		return s.decode(start, data[25:])
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		if len(data) != 18 {
			return nil, fmt.Errorf("%w: keepalive of %d bytes", ErrProtocol, len(data))
		}
		walEnd := LSN(binary.BigEndian.Uint64(data[1:]))
		if data[17] != 0 {
			if err := s.sendStatus(ctx); err != nil {
				return nil, err
			}
		}
		if s.inTx {
			return nil, nil
		}
		s.idle = max(s.idle, walEnd)
		s.ev = Event{Kind: KindKeepalive, WALEnd: walEnd}
		return &s.ev, nil
	}
	return nil, fmt.Errorf("%w: CopyData message type %q", ErrProtocol, data[0])
}

// decode turns one pgoutput message into the event it reports, checking
// that the stream keeps pgoutput's order: changes only inside a
// transaction, of relations described before, commits in increasing LSN
// order.
func (s *Stream) decode(start LSN, payload []byte) (*Event, error) {
	m := &s.msg
	if err := decodeMessage(payload, m); err != nil {
		return nil, fmt.Errorf("%w: at %s: %w", ErrProtocol, start, err)
	}
	ev := &s.ev
	tx := ev.Tx
	*ev = Event{WALStart: start, Tx: tx, Truncated: ev.Truncated[:0]}
	if !s.inTx && m.kind != msgBegin && m.kind != msgRelation && m.kind != msgType &&
		!(m.kind == msgMessage && m.flags == 0) {
		return nil, fmt.Errorf("%w: a %q message outside a transaction at %s", ErrProtocol, m.kind, start)
	}
	switch m.kind {
	case msgBegin:
		if s.inTx {
			return nil, fmt.Errorf("%w: Begin at %s inside the transaction of xid %d", ErrProtocol, start, tx.Xid)
		}
		if m.finalLSN <= s.lastCommit {
			return nil, fmt.Errorf("%w: transaction committing at %s after one at %s", ErrProtocol, m.finalLSN, s.lastCommit)
		}
		s.inTx = true
		ev.Kind = KindBegin
		ev.Tx = Begin{Xid: m.xid, FinalLSN: m.finalLSN, CommitTime: pgTime(m.commitTime)}
	case msgCommit:
		if m.commitLSN != tx.FinalLSN || m.endLSN <= m.commitLSN {
			return nil, fmt.Errorf("%w: Commit at %s (end %s) of the transaction begun for %s", ErrProtocol,
				m.commitLSN, m.endLSN, tx.FinalLSN)
		}
		s.inTx = false
		s.lastCommit, s.lastEnd = m.commitLSN, m.endLSN
		ev.Kind = KindCommit
		ev.Commit = Commit{LSN: m.commitLSN, End: m.endLSN, Time: pgTime(m.commitTime), Flags: m.flags}
	case msgOrigin:
		ev.Kind = KindOrigin
		ev.Origin = Origin{Name: string(m.name), LSN: m.lsn}
	case msgRelation:
		s.relation(ev, m)
	case msgType:
		ev.Kind = KindType
		ev.Type = TypeInfo{OID: m.relID, Namespace: string(m.namespace), Name: string(m.name)}
	case msgInsert, msgUpdate, msgDelete:
		return ev, s.change(ev, m)
	case msgTruncate:
		ev.Kind = KindTruncate
		ev.TruncateOptions = m.flags
		for _, id := range m.relIDs {
			r := s.rels[id]
			if r == nil {
				return nil, fmt.Errorf("%w: Truncate at %s of relation %d never described", ErrProtocol, start, id)
			}
			ev.Truncated = append(ev.Truncated, r)
		}
	case msgMessage:
		ev.Kind = KindMessage
		ev.Message = Message{Transactional: m.flags == 1, LSN: m.lsn, Prefix: string(m.name), Content: m.content}
	}
	if !s.inTx && ev.Kind != KindCommit {
		ev.Tx = Begin{}
	}
	return ev, nil
}

// relation records a Relation message and reports what it changes. A
// relation identical to the one it replaces keeps the same *Relation.
func (s *Stream) relation(ev *Event, m *message) {
	next := newRelation(m)
	prev := s.rels[next.ID]
	ev.Kind = KindRelation
	ev.Schema = diffRelation(prev, next)
	if prev != nil && !ev.Schema.Changed() && sameColumns(prev, next) {
		next = prev
	}
	s.rels[next.ID] = next
	ev.Relation = next
}

func sameColumns(a, b *Relation) bool {
	if len(a.Columns) != len(b.Columns) {
		return false
	}
	for i := range a.Columns {
		if a.Columns[i] != b.Columns[i] {
			return false
		}
	}
	return true
}

func (s *Stream) change(ev *Event, m *message) error {
	r := s.rels[m.relID]
	if r == nil {
		return fmt.Errorf("%w: change at %s of relation %d never described", ErrProtocol, ev.WALStart, m.relID)
	}
	ev.Relation = r
	ev.OldKind = m.oldKind
	switch m.kind {
	case msgInsert:
		ev.Kind = KindInsert
	case msgUpdate:
		ev.Kind = KindUpdate
	default:
		ev.Kind = KindDelete
	}
	if ev.Kind != KindDelete {
		ev.New = m.new
	}
	if m.oldKind != 0 {
		ev.Old = m.old
	}
	if (ev.Kind != KindDelete && len(ev.New.Values) != len(r.Columns)) || (m.oldKind != 0 && len(ev.Old.Values) != len(r.Columns)) {
		return fmt.Errorf("%w: %s change at %s has %d/%d values for %d columns", ErrProtocol, r.QualifiedName(),
			ev.WALStart, len(ev.Old.Values), len(ev.New.Values), len(r.Columns))
	}
	return nil
}

// IdlePosition returns the WAL end of the last keepalive the server sent
// between transactions, when confirming it is safe: no transaction is
// open and every transaction delivered has been confirmed (Confirmed() is
// at or past the last Commit.End). Everything before that position has
// been decoded, and every transaction of the publications that commits
// before it was delivered, so confirming it skips nothing; a transaction
// still running on the server commits after it and is delivered after a
// restart. Confirming it lets the server recycle WAL that other tables or
// databases wrote while the publication was quiet. ok is false when there
// is nothing new to confirm or the rule does not hold.
func (s *Stream) IdlePosition() (pos LSN, ok bool) {
	if s.inTx || s.confirmed < s.lastEnd || s.idle <= s.confirmed {
		return 0, false
	}
	return s.idle, true
}

// Confirm tells the server that everything up to lsn is applied (the
// standby status update's write, flush and apply positions): a restart
// will not deliver a transaction that commits before lsn. Call it with a
// Commit.End only after that transaction and all before it are applied
// and verified, or with IdlePosition's position. A position before the
// last one confirmed is ignored; one past the last Commit.End delivered
// (other than IdlePosition's) is ErrConfirmAhead and is not sent.
func (s *Stream) Confirm(ctx context.Context, lsn LSN) error {
	if s.err != nil {
		return s.err
	}
	if lsn <= s.confirmed {
		return nil
	}
	limit := s.lastEnd
	if idle, ok := s.IdlePosition(); ok {
		limit = idle
	}
	if lsn > limit {
		return internal(fmt.Errorf("slot %s: confirm %s: %w (last commit end %s, idle position %s)", s.cfg.Slot, lsn,
			ErrConfirmAhead, s.lastEnd, s.idle))
	}
	s.confirmed = lsn
	if err := s.sendStatus(ctx); err != nil {
		return s.fail(err)
	}
	return nil
}

// Heartbeat sends the confirmed position again, so the server does not
// time the stream out while the caller is busy elsewhere.
func (s *Stream) Heartbeat(ctx context.Context) error {
	if s.err != nil {
		return s.err
	}
	if err := s.sendStatus(ctx); err != nil {
		return s.fail(err)
	}
	return nil
}

// sendStatus sends a standby status update with the confirmed position as
// write, flush and apply positions: the server keeps confirmed_flush_lsn
// at what the caller confirmed, never at what was merely received.
func (s *Stream) sendStatus(ctx context.Context) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(statusTimeout)
	}
	_ = s.netc.SetWriteDeadline(deadline)
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: s.confirmed, WALFlushPosition: s.confirmed, WALApplyPosition: s.confirmed})
	if err != nil {
		return fmt.Errorf("%w: send status (confirmed %s): %w", ErrConnLost, s.confirmed, err)
	}
	return nil
}

// Close ends the stream and its connection. Nothing is confirmed.
func (s *Stream) Close() {
	if s.closed {
		return
	}
	s.closed = true
	if s.unwatch != nil {
		s.unwatch()
	}
	if s.err == nil {
		s.err = internal(fmt.Errorf("slot %s: stream closed", s.cfg.Slot))
	}
	_ = s.netc.SetDeadline(time.Now().Add(closeTimeout))
	closeConn(s.conn)
}

// The time limits of the stream's own I/O: a status update when the
// context sets none, and the close.
const (
	statusTimeout = 30 * time.Second
	closeTimeout  = 5 * time.Second
)

// watch makes a cancellation of ctx end a blocked read: once per context
// (successive calls with the same ctx cost nothing).
func (s *Stream) watch(ctx context.Context) {
	if ctx == s.watched {
		return
	}
	if s.unwatch != nil {
		s.unwatch()
		s.unwatch = nil
	}
	s.watched = ctx
	s.armed = false
	if ctx.Done() != nil {
		netc := s.netc
		s.unwatch = context.AfterFunc(ctx, func() { _ = netc.SetReadDeadline(time.Unix(1, 0)) })
	}
}

// arm sets the read deadline to the earlier of ctx's deadline and the idle
// timeout, touching the connection only when the deadline set is not
// known to hold, is later than wanted, or is more than a quarter of the
// idle timeout early (an early expiry just re-arms).
func (s *Stream) arm(ctx context.Context) {
	want, hasCtx := ctx.Deadline()
	if s.cfg.IdleTimeout > 0 && !s.inTx {
		if idleAt := s.lastMsg.Add(s.cfg.IdleTimeout); !hasCtx || idleAt.Before(want) {
			want = idleAt
		}
	}
	if s.armed {
		if want.IsZero() && s.deadline.IsZero() {
			return
		}
		if !want.IsZero() && !s.deadline.IsZero() && !s.deadline.After(want) &&
			want.Sub(s.deadline) < max(s.cfg.IdleTimeout/4, time.Millisecond) {
			return
		}
	}
	s.deadline, s.armed = want, true
	_ = s.netc.SetReadDeadline(want)
}

// fail ends the stream with err, classified: a lost connection is
// transient, the server's refusals are the slot's.
func (s *Stream) fail(err error) error {
	s.err = streamError(s.cfg.Slot, s.confirmed, err)
	s.inTx = false
	return s.err
}

func streamError(slot string, confirmed LSN, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedObject {
		// While streaming, the slot cannot be dropped (it is active): the
		// object the server could not find is a publication, which
		// pgoutput reads when it decodes a change.
		return configErr(fmt.Errorf("slot %s: %w: %w", slot, ErrPublicationMissing, err))
	}
	if errors.Is(err, ErrProtocol) || errors.Is(err, ErrConfirmAhead) {
		return internal(fmt.Errorf("slot %s: %w", slot, err))
	}
	if errors.As(err, &pgErr) && outcome.Classify(err) != outcome.Transient {
		return fmt.Errorf("slot %s (confirmed %s): %w", slot, confirmed, err)
	}
	if !errors.Is(err, ErrConnLost) {
		err = fmt.Errorf("%w: %w", ErrConnLost, err)
	}
	return transient(fmt.Errorf("slot %s (confirmed %s): %w", slot, confirmed, err))
}
