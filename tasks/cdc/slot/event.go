package slot

import (
	"time"

	"github.com/jackc/pglogrepl"
)

// LSN is a position in PostgreSQL's write-ahead log (pglogrepl's type:
// String gives "16/B374D848", ParseLSN reads it).
type LSN = pglogrepl.LSN

// Kind is what an Event reports.
type Kind uint8

// The kinds of Event, in the order a transaction brings them: Begin, then
// its Origin when it was replicated from elsewhere, then Type, Relation,
// Insert, Update, Delete, Truncate and transactional Message events in WAL
// order, then Commit. A non-transactional Message, a Keepalive and an Idle
// come only between transactions.
const (
	// KindBegin opens a transaction: Event.Tx.
	KindBegin Kind = iota + 1
	// KindCommit closes it: Event.Commit. The transaction is whole once
	// its Commit arrives; Commit.End is the position to confirm once it
	// has been applied.
	KindCommit
	// KindInsert: Event.Relation, Event.New.
	KindInsert
	// KindUpdate: Event.Relation, Event.New, and Event.Old when the
	// update changed the replica identity's key (OldKey) or the table's
	// identity is FULL (OldFull).
	KindUpdate
	// KindDelete: Event.Relation, Event.Old (OldKey or OldFull).
	KindDelete
	// KindTruncate: Event.Truncated, Event.TruncateOptions.
	KindTruncate
	// KindRelation: a table's columns, sent before its first change in a
	// session and again after any change to its definition: Event.Relation
	// and Event.Schema (what differs from the relation it replaces).
	KindRelation
	// KindType: a column type that is not built in (an enum, a domain, a
	// composite): Event.Type.
	KindType
	// KindOrigin: the transaction was replicated from another node
	// (logical replication with origins): Event.Origin.
	KindOrigin
	// KindMessage: a pg_logical_emit_message: Event.Message.
	KindMessage
	// KindKeepalive: the server sent a keepalive between transactions:
	// everything up to Event.WALEnd has been decoded and every committed
	// transaction of the publications before it delivered. See
	// Stream.IdlePosition for when that position may be confirmed.
	KindKeepalive
	// KindIdle: no data (keepalives aside) arrived for
	// StreamConfig.IdleTimeout between transactions: the stream has caught
	// up.
	KindIdle
)

var kindNames = [...]string{"", "begin", "commit", "insert", "update", "delete", "truncate", "relation", "type",
	"origin", "message", "keepalive", "idle"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return "unknown"
}

// The kinds of Value, as pgoutput's TupleData names them.
const (
	// ValueNull: SQL NULL (an explicit NULL stays NULL, whatever the
	// column's DEFAULT).
	ValueNull byte = 'n'
	// ValueUnchanged: an unchanged TOASTed value that the server did not
	// send (UPDATE of other columns under REPLICA IDENTITY DEFAULT or
	// INDEX). The value is whatever the row held before.
	ValueUnchanged byte = 'u'
	// ValueText: the value in PostgreSQL's text output format.
	ValueText byte = 't'
	// ValueBinary: the value in the type's binary send format
	// (StreamConfig.Binary).
	ValueBinary byte = 'b'
)

// Value is one column's value in a Tuple.
type Value struct {
	// Kind is ValueNull, ValueUnchanged, ValueText or ValueBinary.
	Kind byte
	// Data is the value as the server sent it (nil for NULL and
	// unchanged): in the receive buffer, valid until the next Stream.Next.
	Data []byte
}

// Tuple is a row's values, one per Relation column, in column order.
type Tuple struct {
	Values []Value
}

// Column is one column of a Relation.
type Column struct {
	// Name as PostgreSQL spells it (unquoted).
	Name string
	// TypeOID is the column's type (pg_type.oid); TypeMod its modifier
	// (atttypmod: a varchar's length + 4, a numeric's precision and scale;
	// -1 when none).
	TypeOID uint32
	TypeMod int32
	// Key: the column is part of the replica identity (the primary key,
	// the identity index, or every column under REPLICA IDENTITY FULL).
	Key bool
}

// The replica identities a Relation reports (pg_class.relreplident).
const (
	IdentityDefault byte = 'd' // the primary key
	IdentityNothing byte = 'n'
	IdentityFull    byte = 'f'
	IdentityIndex   byte = 'i'
)

// Relation is a published table as a Relation message describes it: the
// columns its tuples carry, in order.
type Relation struct {
	// ID is the table's OID (pg_class.oid), which every change names.
	ID        uint32
	Namespace string
	Name      string
	// Identity is IdentityDefault, IdentityNothing, IdentityFull or
	// IdentityIndex.
	Identity byte
	Columns  []Column
}

// KeyColumns returns the indexes of the columns flagged Key.
func (r *Relation) KeyColumns() []int {
	var out []int
	for i, c := range r.Columns {
		if c.Key {
			out = append(out, i)
		}
	}
	return out
}

// Column returns the index of the column called name, or -1.
func (r *Relation) Column(name string) int {
	for i, c := range r.Columns {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// QualifiedName is "schema.table" (unquoted).
func (r *Relation) QualifiedName() string { return r.Namespace + "." + r.Name }

// Begin is the transaction an event belongs to.
type Begin struct {
	// Xid is the transaction's id.
	Xid uint32
	// FinalLSN is the LSN of its commit record (Commit.LSN).
	FinalLSN LSN
	// CommitTime is when it committed.
	CommitTime time.Time
}

// Commit closes a transaction.
type Commit struct {
	// LSN is the commit record's position; End is where the record ends:
	// the position to confirm once the transaction is applied. A restart
	// from a confirmed End re-delivers every transaction whose commit
	// comes after it and none before.
	LSN LSN
	End LSN
	// Time is when it committed.
	Time time.Time
	// Flags is pgoutput's commit flags byte (0 in PostgreSQL 15).
	Flags uint8
}

// TypeInfo names a column type that is not built in.
type TypeInfo struct {
	OID       uint32
	Namespace string
	Name      string
}

// Origin names the node a transaction was replicated from.
type Origin struct {
	// Name is the replication origin's name; LSN the commit's position on
	// that node.
	Name string
	LSN  LSN
}

// Message is a pg_logical_emit_message.
type Message struct {
	// Transactional: emitted as part of the enclosing transaction (it
	// arrives between Begin and Commit); otherwise at once, between
	// transactions.
	Transactional bool
	// LSN is the message's position; Prefix and Content what was emitted
	// (Content valid until the next Stream.Next).
	LSN     LSN
	Prefix  string
	Content []byte
}

// The TRUNCATE options a Truncate event reports.
const (
	TruncateCascade         uint8 = 1
	TruncateRestartIdentity uint8 = 2
)

// Event is one thing the slot reports. The Stream reuses it: an Event and
// everything it points to (tuples, message content; not Relations, which
// are never changed once reported) are valid until the next call of
// Stream.Next; copy what must outlive it.
type Event struct {
	Kind Kind
	// WALStart is the position of the WAL record the event decodes (for a
	// change, the change's own LSN: it grows within a transaction).
	WALStart LSN
	// Tx is the open transaction: set from its Begin to its Commit,
	// inclusive.
	Tx Begin
	// Commit: KindCommit.
	Commit Commit
	// Relation is the relation in effect: for KindInsert, KindUpdate and
	// KindDelete the changed table, for KindRelation the new definition.
	Relation *Relation
	// Schema: KindRelation; what differs from the relation it replaces.
	Schema SchemaChange
	// OldKind is OldKey or OldFull when Old holds an old image (KindUpdate,
	// KindDelete), else 0.
	OldKind byte
	Old     Tuple
	// New: KindInsert, KindUpdate.
	New Tuple
	// Truncated: KindTruncate, the truncated relations (each reported by a
	// KindRelation event before); TruncateOptions TruncateCascade and
	// TruncateRestartIdentity.
	Truncated       []*Relation
	TruncateOptions uint8
	// Type: KindType.
	Type TypeInfo
	// Origin: KindOrigin.
	Origin Origin
	// Message: KindMessage.
	Message Message
	// WALEnd: KindKeepalive, the server's position (everything before it
	// decoded).
	WALEnd LSN
}
