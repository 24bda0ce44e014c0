package change

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// Ledger row kinds.
const (
	LedgerBatch    = "batch"
	LedgerBaseline = "baseline"
)

// LedgerEntry is one ledger row.
type LedgerEntry struct {
	Seq                  uint64
	Kind, Digest, Holder string
	AppliedAt            time.Time
	Events, Keys         uint64
	Pending              uint64
	MinVersion           uint64
	MaxVersion           uint64
	HighVersion          uint64
	SnapshotLSN          uint64
	LastTx               int64
	LastTxSet            bool
	LastFloor            uint64
	OpenKeys             []OpenKey
	Source               SourceID
}

// LedgerState is what apply reads from the ledger under the lock.
type LedgerState struct {
	Last   *LedgerEntry // the latest row; nil when the ledger is empty
	Replay *LedgerEntry // the row of an earlier apply of this batch's digest
	// BeforeReplay is the row before replay (nil: none): what that apply
	// followed (its snapshot LSN, its open keys).
	BeforeReplay *LedgerEntry
}

// DescribeEntry renders a ledger row for messages.
func DescribeEntry(name string, e *LedgerEntry) string {
	if e.Kind == LedgerBaseline {
		return fmt.Sprintf("%s row %d (the rows the target held when its ledger was made, %s): versions up to %d",
			name, e.Seq, e.AppliedAt.UTC().Format(time.RFC3339), e.HighVersion)
	}
	return fmt.Sprintf("%s row %d (batch applied %s by %s, %d events from %s): versions up to %d",
		name, e.Seq, e.AppliedAt.UTC().Format(time.RFC3339), e.Holder, e.Events, e.Source.Describe(), e.HighVersion)
}

// Describe names the source as the batches (or the slot) named it,
// leaving out what they did not say.
func (s *SourceID) Describe() string {
	if s == nil || (s.Connector == "" && s.Name == "" && s.Db == "") {
		return "an unnamed source"
	}
	var parts []string
	if s.Connector != "" {
		parts = append(parts, "connector "+s.Connector)
	}
	if s.Name != "" {
		parts = append(parts, strconv.Quote(s.Name))
	}
	if s.Version != "" {
		parts = append(parts, "(Debezium "+s.Version+")")
	}
	if s.Db != "" {
		parts = append(parts, "on database "+s.Db)
	}
	return strings.Join(parts, " ")
}

// KeyValues decodes key bytes (EncodeKey) into a row's values: the key
// columns set, the others zero.
func KeyValues(m *mapping.Mapping, key string) []Value {
	vals := make([]Value, len(m.Cols))
	b := []byte(key)
	for _, i := range m.KeyIdx {
		switch m.Cols[i].Type.Kind {
		case mapping.KindString, mapping.KindDecimal, mapping.KindUUID:
			n, w := binary.Uvarint(b)
			if w <= 0 || uint64(len(b)-w) < n {
				return vals
			}
			vals[i] = Value{S: string(b[w : w+int(n)])}
			b = b[w+int(n):]
		default:
			if len(b) < 8 {
				return vals
			}
			vals[i] = Value{N: binary.BigEndian.Uint64(b)}
			b = b[8:]
		}
	}
	return vals
}

// SourceID is the source as a batch shows it (metadata.source): the
// connector, its name (Kestra derives it from the flow and the trigger), the
// Debezium version and the database. The ledger records it.
type SourceID struct {
	Connector, Name, Version, Db string
}

// OpenKey is a key left with two live rows at the end of the batch, its
// transaction continuing in the next batch (the ledger carries it).
type OpenKey struct {
	Key    string   `json:"key"`   // hex of the key bytes
	Shown  string   `json:"shown"` // the key as messages render it
	Tx     int64    `json:"tx"`
	Others []string `json:"others"` // hex hashes of the rows the target does not hold
}
