package slot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The pgoutput messages (protocol version 1), by their first byte. Only
// those START_REPLICATION asks for arrive: no streamed (in-progress) or
// two-phase transactions.
const (
	msgBegin    = 'B'
	msgCommit   = 'C'
	msgOrigin   = 'O'
	msgRelation = 'R'
	msgType     = 'Y'
	msgInsert   = 'I'
	msgUpdate   = 'U'
	msgDelete   = 'D'
	msgTruncate = 'T'
	msgMessage  = 'M'
)

// The tuple kinds of an Update's or Delete's old image.
const (
	// OldKey: the old tuple holds the replica identity's key columns (the
	// others are NULL): a DELETE, or an UPDATE that changed the key, of a
	// table whose identity is its primary key or an index.
	OldKey byte = 'K'
	// OldFull: the old tuple holds every column: a table with REPLICA
	// IDENTITY FULL.
	OldFull byte = 'O'
)

// message is one decoded pgoutput message. Its slices point into the
// buffer it was decoded from (and into the Tuple's reused Values): valid
// until that buffer is reused.
type message struct {
	kind byte

	// Begin, Commit.
	finalLSN   LSN // Begin: the commit's LSN
	commitLSN  LSN // Commit
	endLSN     LSN // Commit: the end of the commit record
	commitTime int64
	xid        uint32
	flags      uint8 // Commit, Message (1: transactional), Truncate (options)

	// Relation, Type; Insert, Update, Delete: relID.
	relID     uint32
	namespace []byte
	name      []byte
	identity  byte
	columns   []wireColumn

	// Update, Delete: oldKind is OldKey, OldFull or 0 (no old image).
	oldKind byte
	old     Tuple
	new     Tuple

	// Truncate.
	relIDs []uint32

	// Origin, Message: lsn; Message: prefix in name, content.
	lsn     LSN
	content []byte
}

// wireColumn is one column of a Relation message, its name still in the
// buffer.
type wireColumn struct {
	flags   uint8
	name    []byte
	typeOID uint32
	typeMod int32
}

// errCutShort: a field runs past the end of the message.
var errCutShort = errors.New("cut short")

// decoder reads one pgoutput message from a byte slice, strictly: a
// message cut short, with bytes left over, or with a field out of its
// range is an error (never a panic), so a stream that is not what
// PostgreSQL writes is refused rather than misread.
type decoder struct {
	buf []byte
	pos int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("offset %d: "+format, append([]any{d.pos}, args...)...)
	}
}

// The field readers take the field's name in two parts (the message or
// tuple, and the field), joined only when the message is malformed: the
// decoder allocates nothing for a well-formed message.

func (d *decoder) need(n int, what, part string) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || len(d.buf)-d.pos < n {
		d.fail("%s%s: %w: %d bytes left, %d needed", what, part, errCutShort, len(d.buf)-d.pos, n)
		return false
	}
	return true
}

func (d *decoder) u8(what, part string) uint8 {
	if !d.need(1, what, part) {
		return 0
	}
	v := d.buf[d.pos]
	d.pos++
	return v
}

func (d *decoder) u16(what, part string) uint16 {
	if !d.need(2, what, part) {
		return 0
	}
	v := binary.BigEndian.Uint16(d.buf[d.pos:])
	d.pos += 2
	return v
}

func (d *decoder) u32(what, part string) uint32 {
	if !d.need(4, what, part) {
		return 0
	}
	v := binary.BigEndian.Uint32(d.buf[d.pos:])
	d.pos += 4
	return v
}

func (d *decoder) u64(what, part string) uint64 {
	if !d.need(8, what, part) {
		return 0
	}
	v := binary.BigEndian.Uint64(d.buf[d.pos:])
	d.pos += 8
	return v
}

// cstring reads a NUL-terminated string, without its NUL.
func (d *decoder) cstring(what, part string) []byte {
	if d.err != nil {
		return nil
	}
	end := bytes.IndexByte(d.buf[d.pos:], 0)
	if end < 0 {
		d.fail("%s%s: %w: no terminating NUL", what, part, errCutShort)
		return nil
	}
	s := d.buf[d.pos : d.pos+end : d.pos+end]
	d.pos += end + 1
	return s
}

func (d *decoder) done(kind byte) {
	if d.err == nil && d.pos != len(d.buf) {
		d.fail("%q message has %d bytes left over", kind, len(d.buf)-d.pos)
	}
}

// decodeMessage decodes data, one XLogData payload, into m, reusing m's
// slices. It returns an error naming the message kind and the offset when
// data is not a well-formed pgoutput (version 1) message.
func decodeMessage(data []byte, m *message) error {
	d := decoder{buf: data}
	if len(data) == 0 {
		return fmt.Errorf("empty pgoutput message")
	}
	m.kind = d.u8("message", " type")
	switch m.kind {
	case msgBegin:
		m.finalLSN = LSN(d.u64("Begin", " final LSN"))
		m.commitTime = int64(d.u64("Begin", " commit time"))
		m.xid = d.u32("Begin", " xid")
	case msgCommit:
		m.flags = d.u8("Commit", " flags")
		m.commitLSN = LSN(d.u64("Commit", " LSN"))
		m.endLSN = LSN(d.u64("Commit", " end LSN"))
		m.commitTime = int64(d.u64("Commit", " time"))
	case msgOrigin:
		m.lsn = LSN(d.u64("Origin", " LSN"))
		m.name = d.cstring("Origin", " name")
	case msgRelation:
		decodeRelation(&d, m)
	case msgType:
		m.relID = d.u32("Type", " OID") // the type's OID
		m.namespace = d.cstring("Type", " namespace")
		m.name = d.cstring("Type", " name")
	case msgInsert:
		m.relID = d.u32("Insert", " relation")
		m.oldKind = 0
		if tag := d.u8("Insert", " tuple tag"); d.err == nil && tag != 'N' {
			d.fail("Insert tuple tag %q, want 'N'", tag)
		}
		decodeTuple(&d, &m.new, "Insert tuple")
	case msgUpdate:
		m.relID = d.u32("Update", " relation")
		m.oldKind = 0
		tag := d.u8("Update", " tuple tag")
		if tag == OldKey || tag == OldFull {
			m.oldKind = tag
			decodeTuple(&d, &m.old, "Update old tuple")
			tag = d.u8("Update", " new tuple tag")
		}
		if d.err == nil && tag != 'N' {
			d.fail("Update tuple tag %q, want 'K', 'O' or 'N'", tag)
		}
		decodeTuple(&d, &m.new, "Update new tuple")
	case msgDelete:
		m.relID = d.u32("Delete", " relation")
		m.oldKind = d.u8("Delete", " tuple tag")
		if d.err == nil && m.oldKind != OldKey && m.oldKind != OldFull {
			d.fail("Delete tuple tag %q, want 'K' or 'O'", m.oldKind)
		}
		decodeTuple(&d, &m.old, "Delete old tuple")
	case msgTruncate:
		n := d.u32("Truncate", " relation count")
		if d.err == nil && n == 0 {
			d.fail("Truncate of no relation")
		}
		m.flags = d.u8("Truncate", " options")
		if d.need(4*int(n), "Truncate", " relations") {
			m.relIDs = m.relIDs[:0]
			for range n {
				m.relIDs = append(m.relIDs, d.u32("Truncate", " relation"))
			}
		}
	case msgMessage:
		m.flags = d.u8("Message", " flags")
		if d.err == nil && m.flags > 1 {
			d.fail("Message flags %d, want 0 or 1", m.flags)
		}
		m.lsn = LSN(d.u64("Message", " LSN"))
		m.name = d.cstring("Message", " prefix")
		n := d.u32("Message", " length")
		if d.need(int(n), "Message", " content") {
			m.content = d.buf[d.pos : d.pos+int(n) : d.pos+int(n)]
			d.pos += int(n)
		}
	default:
		return fmt.Errorf("pgoutput message type %q is not one protocol version 1 sends", m.kind)
	}
	d.done(m.kind)
	return d.err
}

func decodeRelation(d *decoder, m *message) {
	m.relID = d.u32("Relation", " id")
	m.namespace = d.cstring("Relation", " namespace")
	m.name = d.cstring("Relation", " name")
	m.identity = d.u8("Relation", " replica identity")
	n := int(d.u16("Relation", " column count"))
	m.columns = m.columns[:0]
	for i := 0; i < n && d.err == nil; i++ {
		c := wireColumn{flags: d.u8("Relation", " column flags")}
		c.name = d.cstring("Relation", " column name")
		c.typeOID = d.u32("Relation", " column type")
		c.typeMod = int32(d.u32("Relation", " column type modifier"))
		m.columns = append(m.columns, c)
	}
}

// decodeTuple reads a TupleData into t, reusing t.Values.
func decodeTuple(d *decoder, t *Tuple, what string) {
	n := int(d.u16(what, " column count"))
	if d.err != nil {
		return
	}
	if cap(t.Values) < n {
		t.Values = make([]Value, n, max(n, 2*cap(t.Values)))
	}
	t.Values = t.Values[:n]
	for i := range n {
		v := &t.Values[i]
		v.Kind = d.u8(what, " value kind")
		v.Data = nil
		switch v.Kind {
		case ValueNull, ValueUnchanged:
		case ValueText, ValueBinary:
			l := d.u32(what, " value length")
			if d.need(int(l), what, " value") {
				v.Data = d.buf[d.pos : d.pos+int(l) : d.pos+int(l)]
				d.pos += int(l)
			}
		default:
			d.fail("%s value %d kind %q, want 'n', 'u', 't' or 'b'", what, i+1, v.Kind)
		}
		if d.err != nil {
			t.Values = t.Values[:i]
			return
		}
	}
}

// pgEpochMicros is PostgreSQL's epoch (2000-01-01 UTC) in Unix microseconds.
const pgEpochMicros = 946684800 * 1_000_000

// pgTime converts a PostgreSQL timestamp (microseconds since 2000-01-01
// UTC) to a time.Time in UTC.
func pgTime(micros int64) time.Time {
	return time.UnixMicro(micros + pgEpochMicros).UTC()
}
