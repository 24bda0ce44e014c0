package slot

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/jackc/pglogrepl"
)

func col(name string, oid uint32, key bool) Column {
	return Column{Name: name, TypeOID: oid, TypeMod: -1, Key: key}
}

// TestDiffRelation: what a Relation changes, column by column.
func TestDiffRelation(t *testing.T) {
	base := &Relation{ID: 1, Namespace: "public", Name: "t", Identity: IdentityDefault,
		Columns: []Column{col("id", 23, true), col("a", 25, false), col("b", 23, false)}}
	with := func(change func(r *Relation)) *Relation {
		r := &Relation{ID: base.ID, Namespace: base.Namespace, Name: base.Name, Identity: base.Identity,
			Columns: slices.Clone(base.Columns)}
		change(r)
		return r
	}
	cases := []struct {
		name string
		prev *Relation
		next *Relation
		want string
	}{
		{"first", nil, base, "first"},
		{"same", base, with(func(*Relation) {}), ""},
		{"added", base, with(func(r *Relation) { r.Columns = append(r.Columns, col("c", 1700, false)) }), "+c"},
		{"dropped", base, with(func(r *Relation) { r.Columns = slices.Delete(r.Columns, 1, 2) }), "-a"},
		{"retyped", base, with(func(r *Relation) { r.Columns[2].TypeOID = 20 }), "~b"},
		{"typmod", base, with(func(r *Relation) { r.Columns[1].TypeMod = 54 }), "~a"},
		{"key widened", base, with(func(r *Relation) { r.Columns[2].Key = true }), "key"},
		{"key column dropped", base, with(func(r *Relation) { r.Columns = r.Columns[1:] }), "-id key"},
		{"identity full", base, with(func(r *Relation) { r.Identity = IdentityFull }), "identity"},
		{"table renamed", base, with(func(r *Relation) { r.Name = "t2" }), "renamed"},
		{"schema changed", base, with(func(r *Relation) { r.Namespace = "other" }), "renamed"},
		{"reordered", base, with(func(r *Relation) { r.Columns[1], r.Columns[2] = r.Columns[2], r.Columns[1] }), "reordered"},
		{"column renamed", base, with(func(r *Relation) { r.Columns[1].Name = "a2" }), "+a2 -a rename?a->a2"},
		{"dropped and added elsewhere", base, with(func(r *Relation) {
			r.Columns = append(slices.Delete(r.Columns, 1, 2), col("z", 25, false))
		}), "+z -a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := diffRelation(c.prev, c.next)
			got := strings.TrimSpace(strings.Trim(renderSchema(&d), " ()"))
			if c.prev == nil {
				if d.Changed() || d.Prev != nil {
					t.Errorf("the first relation is reported as a change: %+v", d)
				}
				return
			}
			if got == "unchanged" {
				got = ""
			}
			if !strings.HasPrefix(got, c.want) || (c.want == "") != !d.Changed() {
				t.Errorf("diff %q (changed %v), want %q", got, d.Changed(), c.want)
			}
		})
	}
}

// TestHealthRefusal: the slot states refused and how.
func TestHealthRefusal(t *testing.T) {
	ok := Health{Slot: "s", Plugin: "pgoutput", SlotType: "logical", Database: "db", InDatabase: true, WALStatus: "reserved"}
	cases := []struct {
		name   string
		change func(h *Health)
		want   error
		class  outcome.Kind
	}{
		{"streamable", func(*Health) {}, nil, outcome.OK},
		{"extended is still streamable", func(h *Health) { h.WALStatus = "extended" }, nil, outcome.OK},
		{"unreserved is still streamable", func(h *Health) { h.WALStatus = "unreserved" }, nil, outcome.OK},
		{"another plugin", func(h *Health) { h.Plugin = "wal2json" }, ErrSlotPlugin, outcome.Refused},
		{"physical", func(h *Health) { h.SlotType, h.Plugin = "physical", "" }, ErrSlotPlugin, outcome.Refused},
		{"another database", func(h *Health) { h.InDatabase = false }, ErrSlotDatabase, outcome.Refused},
		{"lost", func(h *Health) { h.WALStatus = "lost" }, ErrSlotLost, outcome.Refused},
		{"active", func(h *Health) { h.Active, h.ActivePID = true, 42 }, ErrSlotActive, outcome.Transient},
		{"lost and active: lost first", func(h *Health) { h.WALStatus, h.Active, h.ActivePID = "lost", true, 42 }, ErrSlotLost, outcome.Refused},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := ok
			c.change(&h)
			err := h.refusal()
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) || outcome.Classify(err) != c.class {
				t.Errorf("refusal %v (%s), want %v (%s)", err, outcome.Classify(err), c.want, c.class)
			}
		})
	}
}

// TestIdentityProblem: which replica identities identify rows.
func TestIdentityProblem(t *testing.T) {
	cases := []struct {
		identity       byte
		hasKey, hasIdx bool
		usable         bool
	}{
		{IdentityDefault, true, false, true},
		{IdentityDefault, false, false, false},
		{IdentityFull, false, false, true},
		{IdentityIndex, true, true, true},
		{IdentityIndex, true, false, false},
		{IdentityNothing, true, false, false},
		{'x', true, true, false},
	}
	for _, c := range cases {
		if got := identityProblem(c.identity, c.hasKey, c.hasIdx) == ""; got != c.usable {
			t.Errorf("identity %q, primary key %v, identity index %v: usable %v, want %v", c.identity, c.hasKey, c.hasIdx, got, c.usable)
		}
	}
}

// TestConfigValidation: names and settings refused before any I/O.
func TestConfigValidation(t *testing.T) {
	good := Setup{Slot: "orders_sync", Publication: "orders_pub", Tables: []Table{{"public", "orders"}}}
	setups := map[string]func(s *Setup){
		"slot with upper case":  func(s *Setup) { s.Slot = "Orders" },
		"slot with a dash":      func(s *Setup) { s.Slot = "orders-sync" },
		"slot too long":         func(s *Setup) { s.Slot = strings.Repeat("s", 64) },
		"empty slot":            func(s *Setup) { s.Slot = "" },
		"publication with ','":  func(s *Setup) { s.Publication = "a,b" },
		"publication quoted":    func(s *Setup) { s.Publication = `"p"` },
		"no tables":             func(s *Setup) { s.Tables = nil },
		"tables and all tables": func(s *Setup) { s.AllTables = true },
		"table without schema":  func(s *Setup) { s.Tables = []Table{{"", "t"}} },
		"negative wait":         func(s *Setup) { s.ActiveWait = -time.Second },
	}
	if err := good.validate(); err != nil {
		t.Fatalf("a good setup: %v", err)
	}
	for name, change := range setups {
		s := good
		change(&s)
		if err := s.validate(); !errors.Is(err, ErrConfig) || outcome.Classify(err) != outcome.Config {
			t.Errorf("%s: %v", name, err)
		}
	}
	streams := map[string]StreamConfig{
		"no publication":   {Slot: "s"},
		"bad publication":  {Slot: "s", Publications: []string{"P"}},
		"bad slot":         {Slot: "S", Publications: []string{"p"}},
		"negative idle":    {Slot: "s", Publications: []string{"p"}, IdleTimeout: -1},
		"negative waiting": {Slot: "s", Publications: []string{"p"}, ActiveWait: -1},
	}
	for name, c := range streams {
		if err := c.validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for in, want := range map[string]string{"orders": "public.orders", "sales.Orders": "sales.Orders", "a.b.c": "", ".t": "", "s.": ""} {
		got, err := ParseTable(in)
		if want == "" {
			if !errors.Is(err, ErrConfig) {
				t.Errorf("ParseTable(%q): %v, %v", in, got, err)
			}
		} else if err != nil || got.String() != want {
			t.Errorf("ParseTable(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
}

// TestHints: every sentinel has a remedy, found through the wrapping the
// package puts around it.
func TestHints(t *testing.T) {
	for name, msg := range testenv.Sentinels(t, filepath.Join(".", "errors.go")) {
		var sentinel error
		for _, h := range hints {
			if h.err.Error() == msg {
				sentinel = h.err
			}
		}
		if sentinel == nil {
			t.Errorf("%s (%q) has no hint", name, msg)
			continue
		}
		wrapped := refused(&SlotError{Slot: "s", Err: sentinel})
		if Hint(wrapped) == "" || Hint(&TableError{Table: "public.t", Err: sentinel}) == "" {
			t.Errorf("%s: no hint through SlotError or TableError", name)
		}
	}
	if Hint(errors.New("something else")) != "" {
		t.Error("a hint for an error of no sentinel")
	}
}

// TestStreamRefusesDisorder: the stream refuses what pgoutput never sends,
// as ErrProtocol (internal): changes outside a transaction or of relations
// never described, nested transactions, commits that do not close the
// transaction begun or that go back, tuples of the wrong width.
func TestStreamRefusesDisorder(t *testing.T) {
	rel := &pglogrepl.RelationMessage{RelationID: 7, Namespace: "public", RelationName: "t", ReplicaIdentity: 'd',
		Columns: []*pglogrepl.RelationMessageColumn{{Flags: 1, Name: "id", DataType: 23, TypeModifier: -1}}}
	rel.SetType('R')
	msg := func(m pglogrepl.Message, typ byte) []byte {
		m.(interface{ SetType(pglogrepl.MessageType) }).SetType(pglogrepl.MessageType(typ))
		return encode(m)
	}
	begin := func(final LSN) []byte { return msg(&pglogrepl.BeginMessage{FinalLSN: final, Xid: 9}, 'B') }
	commit := func(lsn, end LSN) []byte {
		return msg(&pglogrepl.CommitMessage{CommitLSN: lsn, TransactionEndLSN: end}, 'C')
	}
	insert := func(id uint32, values ...*pglogrepl.TupleDataColumn) []byte {
		return msg(&pglogrepl.InsertMessage{RelationID: id, Tuple: tupleOf(values...)}, 'I')
	}
	truncate := msg(&pglogrepl.TruncateMessage{RelationNum: 1, RelationIDs: []uint32{8}}, 'T')
	cases := []struct {
		name string
		msgs [][]byte
	}{
		{"change outside a transaction", [][]byte{encode(rel), insert(7, text("1"))}},
		{"change of an undescribed relation", [][]byte{begin(100), insert(8, text("1"))}},
		{"truncate of an undescribed relation", [][]byte{encode(rel), begin(100), truncate}},
		{"begin inside a transaction", [][]byte{begin(100), begin(200)}},
		{"commit without begin", [][]byte{commit(100, 120)}},
		{"commit of another transaction", [][]byte{begin(100), commit(101, 120)}},
		{"commit ending before it starts", [][]byte{begin(100), commit(100, 100)}},
		{"commits going back", [][]byte{begin(100), commit(100, 120), begin(90), commit(90, 95)}},
		{"too few values", [][]byte{encode(rel), begin(100), insert(7)}},
		{"too many values", [][]byte{encode(rel), begin(100), insert(7, text("1"), text("2"))}},
		{"malformed", [][]byte{{'B', 0}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &Stream{rels: map[uint32]*Relation{}}
			var err error
			for i, m := range c.msgs {
				if _, err = s.decode(LSN(i+1), m); err != nil {
					break
				}
			}
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("got %v, want ErrProtocol", err)
			}
			if err := s.fail(err); outcome.Classify(err) != outcome.Internal {
				t.Errorf("%v: class %s, want internal", err, outcome.Classify(err))
			}
		})
	}
}

// TestConfirmRule: what Confirm accepts: any position up to the last
// commit delivered, IdlePosition's only when no transaction is open and
// every delivered one is confirmed; nothing past them.
func TestConfirmRule(t *testing.T) {
	s := &Stream{rels: map[uint32]*Relation{}, confirmed: 50, lastEnd: 50}
	keepalive := func(end LSN) {
		data := []byte{'k', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		for i := range 8 {
			data[1+i] = byte(uint64(end) >> (56 - 8*i))
		}
		if _, err := s.handle(t.Context(), data); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := s.IdlePosition(); ok {
		t.Error("an idle position before any keepalive")
	}
	keepalive(80)
	if pos, ok := s.IdlePosition(); !ok || pos != 80 {
		t.Errorf("idle position %s %v, want 0/50", pos, ok)
	}
	begin := encode(&pglogrepl.BeginMessage{FinalLSN: 100, Xid: 1})
	begin[0] = 'B'
	if _, err := s.decode(90, begin); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.IdlePosition(); ok {
		t.Error("an idle position inside a transaction")
	}
	keepalive(95) // inside the transaction: not an idle position
	c := encode(&pglogrepl.CommitMessage{CommitLSN: 100, TransactionEndLSN: 120})
	c[0] = 'C'
	if _, err := s.decode(100, c); err != nil {
		t.Fatal(err)
	}
	keepalive(130)
	if pos, ok := s.IdlePosition(); ok {
		t.Errorf("idle position %s while the commit ending at 0/78 is unconfirmed", pos)
	}
	s.confirmed = 120 // what Confirm(120) records (without a connection to send it on)
	if pos, ok := s.IdlePosition(); !ok || pos != 130 {
		t.Errorf("idle position %s %v after the commit was confirmed, want 0/82", pos, ok)
	}
}

// TestDocsHaveEveryHint: docs/cdc-slot.md gives every remedy Hint gives,
// word for word, in the row of the sentinel's message.
func TestDocsHaveEveryHint(t *testing.T) {
	doc := string(testenv.ReadFile(t, filepath.Join("..", "..", "..", "docs", "cdc-slot.md")))
	for _, h := range hints {
		row := "| `" + h.err.Error() + "` |"
		i := strings.Index(doc, row)
		if i < 0 {
			t.Errorf("docs/cdc-slot.md has no row for %q", h.err)
			continue
		}
		line, _, _ := strings.Cut(doc[i:], "\n")
		if !strings.HasSuffix(line, "| "+h.text+" |") {
			t.Errorf("docs/cdc-slot.md's row for %q does not end with its hint:\n%s\nwant\n%s", h.err, line, h.text)
		}
	}
}
