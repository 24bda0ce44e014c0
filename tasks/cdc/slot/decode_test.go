package slot

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// encode writes m as pgoutput (protocol version 1) writes it: the
// canonical bytes of a message pglogrepl decodes. It returns nil for a
// message that has no canonical form (a tuple value kind pgoutput never
// sends).
func encode(m pglogrepl.Message) []byte {
	b := []byte{byte(m.Type())}
	u8 := func(v uint8) { b = append(b, v) }
	u16 := func(v uint16) { b = binary.BigEndian.AppendUint16(b, v) }
	u32 := func(v uint32) { b = binary.BigEndian.AppendUint32(b, v) }
	u64 := func(v uint64) { b = binary.BigEndian.AppendUint64(b, v) }
	str := func(s string) { b = append(append(b, s...), 0) }
	pgt := func(t time.Time) { u64(uint64(t.UnixMicro() - pgEpochMicros)) }
	tuple := func(t *pglogrepl.TupleData) bool {
		u16(uint16(len(t.Columns)))
		for _, c := range t.Columns {
			u8(c.DataType)
			switch c.DataType {
			case 'n', 'u':
			case 't', 'b':
				u32(uint32(len(c.Data)))
				b = append(b, c.Data...)
			default:
				return false
			}
		}
		return true
	}
	switch m := m.(type) {
	case *pglogrepl.BeginMessage:
		u64(uint64(m.FinalLSN))
		pgt(m.CommitTime)
		u32(m.Xid)
	case *pglogrepl.CommitMessage:
		u8(m.Flags)
		u64(uint64(m.CommitLSN))
		u64(uint64(m.TransactionEndLSN))
		pgt(m.CommitTime)
	case *pglogrepl.OriginMessage:
		u64(uint64(m.CommitLSN))
		str(m.Name)
	case *pglogrepl.RelationMessage:
		u32(m.RelationID)
		str(m.Namespace)
		str(m.RelationName)
		u8(m.ReplicaIdentity)
		u16(uint16(len(m.Columns)))
		for _, c := range m.Columns {
			u8(c.Flags)
			str(c.Name)
			u32(c.DataType)
			u32(uint32(c.TypeModifier))
		}
	case *pglogrepl.TypeMessage:
		u32(m.DataType)
		str(m.Namespace)
		str(m.Name)
	case *pglogrepl.InsertMessage:
		u32(m.RelationID)
		u8('N')
		if !tuple(m.Tuple) {
			return nil
		}
	case *pglogrepl.UpdateMessage:
		u32(m.RelationID)
		if m.OldTuple != nil {
			u8(m.OldTupleType)
			if !tuple(m.OldTuple) {
				return nil
			}
		}
		u8('N')
		if !tuple(m.NewTuple) {
			return nil
		}
	case *pglogrepl.DeleteMessage:
		u32(m.RelationID)
		u8(m.OldTupleType)
		if !tuple(m.OldTuple) {
			return nil
		}
	case *pglogrepl.TruncateMessage:
		u32(uint32(len(m.RelationIDs)))
		u8(m.Option)
		for _, id := range m.RelationIDs {
			u32(id)
		}
	case *pglogrepl.LogicalDecodingMessage:
		if m.Transactional {
			u8(1)
		} else {
			u8(0)
		}
		u64(uint64(m.LSN))
		str(m.Prefix)
		u32(uint32(len(m.Content)))
		b = append(b, m.Content...)
	default:
		return nil
	}
	return b
}

// oracle decodes data with pglogrepl, reporting a panic (it indexes past
// the end of some cut-short messages) as an error.
func oracle(data []byte) (m pglogrepl.Message, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pglogrepl panicked: %v", r)
		}
	}()
	if len(data) == 0 {
		return nil, fmt.Errorf("empty")
	}
	return pglogrepl.Parse(data)
}

// agree reports how our decoding m differs from pglogrepl's o, or nil.
func agree(m *message, o pglogrepl.Message) error {
	if byte(o.Type()) != m.kind {
		return fmt.Errorf("kind %q, pglogrepl %q", m.kind, byte(o.Type()))
	}
	// pglogrepl converts a timestamp to nanoseconds since 1970 in an
	// int64, which wraps for times past 2262: compare the same way.
	sameTime := func(micros int64, t time.Time) bool { return (micros+pgEpochMicros)*1000 == t.UnixNano() }
	switch o := o.(type) {
	case *pglogrepl.BeginMessage:
		return diff(m.finalLSN == o.FinalLSN && sameTime(m.commitTime, o.CommitTime) && m.xid == o.Xid, m, o)
	case *pglogrepl.CommitMessage:
		return diff(m.flags == o.Flags && m.commitLSN == o.CommitLSN && m.endLSN == o.TransactionEndLSN &&
			sameTime(m.commitTime, o.CommitTime), m, o)
	case *pglogrepl.OriginMessage:
		return diff(m.lsn == o.CommitLSN && string(m.name) == o.Name, m, o)
	case *pglogrepl.RelationMessage:
		ok := m.relID == o.RelationID && string(m.namespace) == o.Namespace && string(m.name) == o.RelationName &&
			m.identity == o.ReplicaIdentity && len(m.columns) == len(o.Columns)
		for i := 0; ok && i < len(o.Columns); i++ {
			c := o.Columns[i]
			ok = m.columns[i].flags == c.Flags && string(m.columns[i].name) == c.Name &&
				m.columns[i].typeOID == c.DataType && m.columns[i].typeMod == c.TypeModifier
		}
		return diff(ok, m, o)
	case *pglogrepl.TypeMessage:
		return diff(m.relID == o.DataType && string(m.namespace) == o.Namespace && string(m.name) == o.Name, m, o)
	case *pglogrepl.InsertMessage:
		return diff(m.relID == o.RelationID && sameTuple(m.new, o.Tuple), m, o)
	case *pglogrepl.UpdateMessage:
		ok := m.relID == o.RelationID && m.oldKind == o.OldTupleType && sameTuple(m.new, o.NewTuple)
		if o.OldTuple != nil {
			ok = ok && sameTuple(m.old, o.OldTuple)
		}
		return diff(ok, m, o)
	case *pglogrepl.DeleteMessage:
		return diff(m.relID == o.RelationID && m.oldKind == o.OldTupleType && sameTuple(m.old, o.OldTuple), m, o)
	case *pglogrepl.TruncateMessage:
		ok := m.flags == o.Option && len(m.relIDs) == len(o.RelationIDs)
		for i := 0; ok && i < len(o.RelationIDs); i++ {
			ok = m.relIDs[i] == o.RelationIDs[i]
		}
		return diff(ok, m, o)
	case *pglogrepl.LogicalDecodingMessage:
		return diff((m.flags == 1) == o.Transactional && m.lsn == o.LSN && string(m.name) == o.Prefix &&
			bytes.Equal(m.content, o.Content), m, o)
	}
	return fmt.Errorf("pglogrepl message %T not compared", o)
}

func diff(ok bool, m *message, o pglogrepl.Message) error {
	if ok {
		return nil
	}
	return fmt.Errorf("decoded %+v, pglogrepl %+v", *m, o)
}

func sameTuple(t Tuple, o *pglogrepl.TupleData) bool {
	if o == nil || len(t.Values) != len(o.Columns) {
		return false
	}
	for i, v := range t.Values {
		c := o.Columns[i]
		if v.Kind != c.DataType || !bytes.Equal(v.Data, c.Data) || (v.Kind == 'n' || v.Kind == 'u') != (v.Data == nil) {
			return false
		}
	}
	return true
}

func tupleOf(cols ...*pglogrepl.TupleDataColumn) *pglogrepl.TupleData {
	return &pglogrepl.TupleData{ColumnNum: uint16(len(cols)), Columns: cols}
}

func text(s string) *pglogrepl.TupleDataColumn {
	return &pglogrepl.TupleDataColumn{DataType: 't', Length: uint32(len(s)), Data: []byte(s)}
}

var (
	null      = &pglogrepl.TupleDataColumn{DataType: 'n'}
	unchanged = &pglogrepl.TupleDataColumn{DataType: 'u'}
)

// sampleMessages are one or more of every kind, with the edge cases of
// their fields: empty strings and tuples, every value kind, long values.
func sampleMessages() map[string]pglogrepl.Message {
	when := time.Date(2026, 12, 1, 10, 30, 0, 123456000, time.UTC)
	msg := func(m pglogrepl.Message, t pglogrepl.MessageType) pglogrepl.Message {
		m.(interface{ SetType(pglogrepl.MessageType) }).SetType(t)
		return m
	}
	long := bytes.Repeat([]byte("x"), 70000)
	return map[string]pglogrepl.Message{
		"begin":                            msg(&pglogrepl.BeginMessage{FinalLSN: 0x16B374D848, CommitTime: when, Xid: 4242}, 'B'),
		"begin before 2000":                msg(&pglogrepl.BeginMessage{FinalLSN: 1, CommitTime: time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC), Xid: 0}, 'B'),
		"commit":                           msg(&pglogrepl.CommitMessage{Flags: 0, CommitLSN: 0x100, TransactionEndLSN: 0x130, CommitTime: when}, 'C'),
		"origin":                           msg(&pglogrepl.OriginMessage{CommitLSN: 0xABCDEF, Name: "node_a"}, 'O'),
		"origin, empty name":               msg(&pglogrepl.OriginMessage{CommitLSN: 1, Name: ""}, 'O'),
		"relation":                         msg(&pglogrepl.RelationMessage{RelationID: 16385, Namespace: "public", RelationName: "orders", ReplicaIdentity: 'd', ColumnNum: 3, Columns: []*pglogrepl.RelationMessageColumn{{Flags: 1, Name: "id", DataType: 20, TypeModifier: -1}, {Name: "amount", DataType: 1700, TypeModifier: 786438}, {Name: "Ünïcode \"col\"", DataType: 25, TypeModifier: -1}}}, 'R'),
		"relation, pg_catalog, no columns": msg(&pglogrepl.RelationMessage{RelationID: 1, Namespace: "", RelationName: "t", ReplicaIdentity: 'n'}, 'R'),
		"type":                             msg(&pglogrepl.TypeMessage{DataType: 20481, Namespace: "public", Name: "mood"}, 'Y'),
		"insert":                           msg(&pglogrepl.InsertMessage{RelationID: 16385, Tuple: tupleOf(text("1"), null, text(""), text("NaN"))}, 'I'),
		"insert, long value":               msg(&pglogrepl.InsertMessage{RelationID: 7, Tuple: tupleOf(&pglogrepl.TupleDataColumn{DataType: 't', Length: uint32(len(long)), Data: long})}, 'I'),
		"insert, binary":                   msg(&pglogrepl.InsertMessage{RelationID: 7, Tuple: tupleOf(&pglogrepl.TupleDataColumn{DataType: 'b', Length: 8, Data: []byte{0, 0, 0, 0, 0, 0, 0, 42}})}, 'I'),
		"update":                           msg(&pglogrepl.UpdateMessage{RelationID: 9, NewTuple: tupleOf(text("1"), unchanged)}, 'U'),
		"update, old key":                  msg(&pglogrepl.UpdateMessage{RelationID: 9, OldTupleType: 'K', OldTuple: tupleOf(text("1"), null), NewTuple: tupleOf(text("2"), unchanged)}, 'U'),
		"update, old row":                  msg(&pglogrepl.UpdateMessage{RelationID: 9, OldTupleType: 'O', OldTuple: tupleOf(text("1"), text("a")), NewTuple: tupleOf(text("1"), text("b"))}, 'U'),
		"delete, key":                      msg(&pglogrepl.DeleteMessage{RelationID: 9, OldTupleType: 'K', OldTuple: tupleOf(text("1"), null)}, 'D'),
		"delete, old row":                  msg(&pglogrepl.DeleteMessage{RelationID: 9, OldTupleType: 'O', OldTuple: tupleOf(text("1"), text("a"))}, 'D'),
		"truncate":                         msg(&pglogrepl.TruncateMessage{RelationNum: 3, Option: 3, RelationIDs: []uint32{1, 2, 3}}, 'T'),
		"message":                          msg(&pglogrepl.LogicalDecodingMessage{LSN: 0x55, Transactional: true, Prefix: "changesink", Content: []byte("heartbeat")}, 'M'),
		"message, empty":                   msg(&pglogrepl.LogicalDecodingMessage{LSN: 0x56, Transactional: false, Prefix: "", Content: []byte{}}, 'M'),
	}
}

// TestDecodeAgreesWithPglogrepl: every kind of message, encoded as
// pgoutput writes it, decodes to what pglogrepl's parser reads.
func TestDecodeAgreesWithPglogrepl(t *testing.T) {
	for name, sample := range sampleMessages() {
		t.Run(name, func(t *testing.T) {
			data := encode(sample)
			var m message
			if err := decodeMessage(data, &m); err != nil {
				t.Fatalf("decode: %v", err)
			}
			o, err := oracle(data)
			if err != nil {
				t.Fatalf("pglogrepl: %v", err)
			}
			if err := agree(&m, o); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestDecodeRefusesMalformed: a message cut short anywhere, with a byte
// left over, or with a tag pgoutput does not write is an error, never a
// panic or a partial success.
func TestDecodeRefusesMalformed(t *testing.T) {
	for name, sample := range sampleMessages() {
		data := encode(sample)
		var m message
		for n := 0; n < len(data); n++ {
			if err := decodeMessage(data[:n], &m); err == nil {
				t.Errorf("%s: cut to %d of %d bytes: decoded", name, n, len(data))
			}
		}
		if err := decodeMessage(append(bytes.Clone(data), 0), &m); err == nil {
			t.Errorf("%s: with a byte left over: decoded", name)
		}
	}
	cases := []struct {
		name string
		data []byte
	}{
		{"unknown type", []byte{'Z'}},
		{"streamed-transaction start (protocol 2)", []byte{'S', 0, 0, 0, 1, 1}},
		{"insert tuple tag", []byte{'I', 0, 0, 0, 1, 'K', 0, 0}},
		{"update tuple tag", []byte{'U', 0, 0, 0, 1, 'X', 0, 0}},
		{"update new-tuple tag after an old key", []byte{'U', 0, 0, 0, 1, 'K', 0, 0, 'O', 0, 0}},
		{"delete tuple tag", []byte{'D', 0, 0, 0, 1, 'N', 0, 0}},
		{"value kind", []byte{'I', 0, 0, 0, 1, 'N', 0, 1, 'x'}},
		{"message flags", append([]byte{'M', 2, 0, 0, 0, 0, 0, 0, 0, 1, 0}, 0, 0, 0, 0)},
		{"value longer than the message", []byte{'I', 0, 0, 0, 1, 'N', 0, 1, 't', 0xff, 0xff, 0xff, 0xff, 'a'}},
		{"truncate count past the end", []byte{'T', 0xff, 0xff, 0xff, 0xff, 0}},
		{"truncate of no relation", []byte{'T', 0, 0, 0, 0, 0}},
		{"relation name without its NUL", []byte{'R', 0, 0, 0, 1, 'p', 0, 't'}},
	}
	for _, c := range cases {
		var m message
		if err := decodeMessage(c.data, &m); err == nil {
			t.Errorf("%s: decoded %x", c.name, c.data)
		}
	}
}

// TestDecodeReuseLeavesNothingBehind: decoding into a message that held a
// longer tuple, an old image and more columns leaves none of them visible.
func TestDecodeReuseLeavesNothingBehind(t *testing.T) {
	samples := sampleMessages()
	var m message
	for _, name := range []string{"update, old row", "insert", "relation", "relation, pg_catalog, no columns",
		"truncate", "update", "delete, key"} {
		data := encode(samples[name])
		if err := decodeMessage(data, &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		o, err := oracle(data)
		if err != nil {
			t.Fatalf("%s: pglogrepl: %v", name, err)
		}
		if err := agree(&m, o); err != nil {
			t.Errorf("%s after the others: %v", name, err)
		}
	}
}

// TestDecodeNoColumns: a table with no columns (CREATE TABLE t ()) gives
// tuples of no values, which pglogrepl's length check refuses and the
// decoder reads.
func TestDecodeNoColumns(t *testing.T) {
	var m message
	if err := decodeMessage([]byte{'I', 0, 0, 0, 7, 'N', 0, 0}, &m); err != nil {
		t.Fatal(err)
	}
	if m.kind != msgInsert || m.relID != 7 || len(m.new.Values) != 0 {
		t.Errorf("decoded %+v", m)
	}
}

// FuzzDecodeMessage: the decoder never panics on any bytes, and whatever
// it accepts pglogrepl reads alike. (pglogrepl is asked only then: on
// arbitrary bytes it allocates whatever a length field claims.)
func FuzzDecodeMessage(f *testing.F) {
	for _, sample := range sampleMessages() {
		f.Add(encode(sample))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m message
		if err := decodeMessage(data, &m); err != nil || noColumnsInsert(data) {
			return
		}
		o, err := oracle(data)
		if err != nil {
			t.Fatalf("decoded %x, pglogrepl refused it: %v", data, err)
		}
		if err := agree(&m, o); err != nil {
			t.Fatalf("%x: %v", data, err)
		}
	})
}

// FuzzDecodeCanonical: every message in pgoutput's form, built from the
// fuzzer's fields (any kind, ids, LSNs, names, tuples of every value kind),
// decodes to what pglogrepl reads from the same bytes.
func FuzzDecodeCanonical(f *testing.F) {
	f.Add(byte(0), uint32(16385), uint64(0x16B374D848), "public", "orders", []byte{2, 3, 'a', 'b', 'c', 0, 1, 3, 2, 'x', 'y'})
	f.Add(byte(5), uint32(1), uint64(1), "", "", []byte{})
	f.Fuzz(func(t *testing.T, kind byte, id uint32, lsn uint64, s1, s2 string, vals []byte) {
		if bytes.IndexByte([]byte(s1+s2), 0) >= 0 {
			return // a NUL cannot be inside a pgoutput string
		}
		when := time.UnixMicro(int64(lsn%(1<<50)) - 1<<49).UTC()
		a, b := tuples(vals)
		var o pglogrepl.Message
		switch kind % 11 {
		case 0:
			o = &pglogrepl.BeginMessage{FinalLSN: pglogrepl.LSN(lsn), CommitTime: when, Xid: id}
		case 1:
			o = &pglogrepl.CommitMessage{Flags: byte(id), CommitLSN: pglogrepl.LSN(lsn), TransactionEndLSN: pglogrepl.LSN(lsn + 48), CommitTime: when}
		case 2:
			o = &pglogrepl.OriginMessage{CommitLSN: pglogrepl.LSN(lsn), Name: s1}
		case 3:
			r := &pglogrepl.RelationMessage{RelationID: id, Namespace: s1, RelationName: s2, ReplicaIdentity: byte(lsn)}
			for i, v := range a.Columns {
				r.Columns = append(r.Columns, &pglogrepl.RelationMessageColumn{Flags: v.DataType & 1, Name: string(bytes.ReplaceAll(v.Data, []byte{0}, nil)),
					DataType: id + uint32(i), TypeModifier: int32(lsn) - int32(i)})
			}
			r.ColumnNum = uint16(len(r.Columns))
			o = r
		case 4:
			o = &pglogrepl.TypeMessage{DataType: id, Namespace: s1, Name: s2}
		case 5:
			o = &pglogrepl.InsertMessage{RelationID: id, Tuple: a}
		case 6:
			o = &pglogrepl.UpdateMessage{RelationID: id, NewTuple: b}
		case 7:
			o = &pglogrepl.UpdateMessage{RelationID: id, OldTupleType: "KO"[lsn%2], OldTuple: a, NewTuple: b}
		case 8:
			o = &pglogrepl.DeleteMessage{RelationID: id, OldTupleType: "KO"[lsn%2], OldTuple: a}
		case 9:
			ids := []uint32{id}
			for _, v := range vals {
				ids = append(ids, uint32(v))
			}
			o = &pglogrepl.TruncateMessage{RelationNum: uint32(len(ids)), Option: byte(lsn % 4), RelationIDs: ids}
		case 10:
			o = &pglogrepl.LogicalDecodingMessage{LSN: pglogrepl.LSN(lsn), Transactional: id%2 == 1, Prefix: s1, Content: vals}
		}
		o.(interface{ SetType(pglogrepl.MessageType) }).SetType(pglogrepl.MessageType(encodeType(o)))
		data := encode(o)
		if noColumnsInsert(data) {
			return
		}
		var m message
		if err := decodeMessage(data, &m); err != nil {
			t.Fatalf("refused %x: %v", data, err)
		}
		back, err := oracle(data)
		if err != nil {
			t.Fatalf("pglogrepl refused %x: %v", data, err)
		}
		if err := agree(&m, back); err != nil {
			t.Fatal(err)
		}
	})
}

// noColumnsInsert: an Insert of a tuple of no columns, which pglogrepl
// refuses by its length alone (TestDecodeNoColumns).
func noColumnsInsert(data []byte) bool { return len(data) == 8 && data[0] == 'I' }

// encodeType is the pgoutput type byte of a pglogrepl message built in a
// test (before SetType).
func encodeType(o pglogrepl.Message) byte {
	switch o.(type) {
	case *pglogrepl.BeginMessage:
		return 'B'
	case *pglogrepl.CommitMessage:
		return 'C'
	case *pglogrepl.OriginMessage:
		return 'O'
	case *pglogrepl.RelationMessage:
		return 'R'
	case *pglogrepl.TypeMessage:
		return 'Y'
	case *pglogrepl.InsertMessage:
		return 'I'
	case *pglogrepl.UpdateMessage:
		return 'U'
	case *pglogrepl.DeleteMessage:
		return 'D'
	case *pglogrepl.TruncateMessage:
		return 'T'
	}
	return 'M'
}

// tuples reads two tuples from fuzzer bytes: each value is a kind byte
// (mod 4: n, u, t, b) and, for t and b, a length byte (mod 16) and that
// many bytes; a 0xff byte starts the second tuple.
func tuples(vals []byte) (a, b *pglogrepl.TupleData) {
	a, b = &pglogrepl.TupleData{}, &pglogrepl.TupleData{}
	cur := a
	for i := 0; i < len(vals); {
		if vals[i] == 0xff {
			cur = b
			i++
			continue
		}
		c := &pglogrepl.TupleDataColumn{DataType: "nutb"[vals[i]%4]}
		i++
		if c.DataType == 't' || c.DataType == 'b' {
			n := 0
			if i < len(vals) {
				n = int(vals[i] % 16)
				i++
			}
			n = min(n, len(vals)-i)
			c.Data = append([]byte{}, vals[i:i+n]...)
			c.Length = uint32(n)
			i += n
		}
		cur.Columns = append(cur.Columns, c)
	}
	a.ColumnNum, b.ColumnNum = uint16(len(a.Columns)), uint16(len(b.Columns))
	return a, b
}

// TestDecodeAllocatesNothing: decoding a change into a message (and an
// event) that decoded one before allocates nothing: values point into the
// receive buffer, tuples reuse their arrays.
func TestDecodeAllocatesNothing(t *testing.T) {
	samples := sampleMessages()
	relation, update := encode(samples["relation"]), encode(samples["update, old row"])
	s := &Stream{rels: map[uint32]*Relation{}}
	if _, err := s.decode(1, relation); err != nil {
		t.Fatal(err)
	}
	begin := encode(&pglogrepl.BeginMessage{FinalLSN: 1 << 40, Xid: 1})
	begin[0] = 'B'
	if _, err := s.decode(2, begin); err != nil {
		t.Fatal(err)
	}
	ins := &pglogrepl.InsertMessage{RelationID: 16385, Tuple: tupleOf(text("1"), text("12.50"), null)} // the relation above
	ins.SetType('I')
	insert := encode(ins)
	for name, data := range map[string][]byte{"update": update, "insert": insert} {
		var m message
		if err := decodeMessage(data, &m); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { _ = decodeMessage(data, &m) }); n != 0 {
			t.Errorf("decoding an %s allocates %.0f times", name, n)
		}
	}
	if _, err := s.decode(3, insert); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := s.decode(3, insert); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("an insert event allocates %.0f times", n)
	}
}

// BenchmarkDecode compares decoding an insert of four columns here and with
// pglogrepl.Parse.
func BenchmarkDecode(b *testing.B) {
	data := encode(sampleMessages()["insert"])
	b.Run("slot", func(b *testing.B) {
		var m message
		b.ReportAllocs()
		for b.Loop() {
			if err := decodeMessage(data, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pglogrepl", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := pglogrepl.Parse(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
