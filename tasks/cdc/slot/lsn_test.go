package slot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestMessagesPrintLSNsAsXY: every message of this package that names a
// position prints it as PostgreSQL does, X/Y (pg_replication_slots,
// pg_current_wal_lsn()), never as the decimal number behind it.
func TestMessagesPrintLSNsAsXY(t *testing.T) {
	const a, b = LSN(0x1_6B3748A0), LSN(0x1_6B3748F0) // 1/6B3748A0, 1/6B3748F0
	msg := func(m pglogrepl.Message, typ byte) []byte {
		m.(interface{ SetType(pglogrepl.MessageType) }).SetType(pglogrepl.MessageType(typ))
		return encode(m)
	}
	decodeAll := func(msgs ...[]byte) error {
		s := &Stream{rels: map[uint32]*Relation{}}
		for i, m := range msgs {
			if _, err := s.decode(a+LSN(i), m); err != nil {
				return err
			}
		}
		return errors.New("decoded every message")
	}
	for _, tt := range []struct {
		name string
		err  error
		want []string
	}{
		{"a slot that lost its WAL", &SlotError{Slot: "s", Err: ErrSlotLost, Restart: a, Confirmed: b},
			[]string{"restart_lsn 1/6B3748A0", "confirmed_flush_lsn 1/6B3748F0"}},
		{"a connection lost", streamError("s", a, errors.New("EOF")), []string{"(confirmed 1/6B3748A0)"}},
		{"a server's error", streamError("s", a, &pgconn.PgError{Code: "XX000", Message: "boom"}), []string{"(confirmed 1/6B3748A0)"}},
		{"a confirm past what was delivered", (&Stream{cfg: StreamConfig{Slot: "s"}, confirmed: a - 1, lastEnd: a}).Confirm(context.Background(), b),
			[]string{"confirm 1/6B3748F0", "last commit end 1/6B3748A0"}},
		{"commits going back", decodeAll(msg(&pglogrepl.BeginMessage{FinalLSN: b, Xid: 9}, 'B'),
			msg(&pglogrepl.CommitMessage{CommitLSN: b, TransactionEndLSN: b + 1}, 'C'),
			msg(&pglogrepl.BeginMessage{FinalLSN: a, Xid: 10}, 'B'), msg(&pglogrepl.CommitMessage{CommitLSN: a, TransactionEndLSN: a + 1}, 'C')),
			[]string{"committing at 1/6B3748A0 after one at 1/6B3748F0"}},
		{"a change of a relation never described", decodeAll(msg(&pglogrepl.BeginMessage{FinalLSN: b, Xid: 9}, 'B'),
			msg(&pglogrepl.InsertMessage{RelationID: 8, Tuple: tupleOf(text("1"))}, 'I')), []string{"change at 1/6B3748A1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil {
				t.Fatal("no error")
			}
			got := tt.err.Error()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q does not say %q", got, w)
				}
			}
			for _, n := range []LSN{a, b, a + 1} {
				if strings.Contains(got, fmt.Sprint(uint64(n))) {
					t.Errorf("%q prints %s as the decimal %d", got, n, uint64(n))
				}
			}
		})
	}
}
