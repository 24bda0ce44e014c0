package merge

import (
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/changesink/changesink/internal/outcome"
)

// SeedsOf turns the previous batch's open keys into the batch's seeds: the
// target holds each key's newest row (cur); the others are known by hash.
func SeedsOf(m *mapping.Mapping, open []change.OpenKey, cur map[string]*change.Row, replay bool) (map[string]*SeedDual, error) {
	seeds := map[string]*SeedDual{}
	for _, o := range open {
		k, err := hex.DecodeString(o.Key)
		if err != nil {
			return nil, outcome.Refused.Mark(fmt.Errorf("%w: the ledger's open key %q is not hex", change.ErrTargetMismatch, o.Key))
		}
		r := cur[string(k)]
		if replay && (r == nil || r.Deleted) {
			// A replay of the batch that met this key: the target holds a
			// later version of it, which the verify accepts whatever it is.
			r = &change.Row{Vals: make([]change.Value, len(m.Cols))}
		}
		if r == nil || r.Deleted {
			return nil, outcome.Refused.Mark(&change.RecordError{Offset: -1, Key: o.Shown, Err: fmt.Errorf(
				"%w: key %s: the previous batch left two live rows of it in transaction %d, but the target lost the newest (another writer?)",
				change.ErrKeyChange, o.Shown, o.Tx)})
		}
		s := &SeedDual{key: string(k), shown: o.Shown, Tx: o.Tx, vals: r.Vals, Version: r.Version}
		for _, h := range o.Others {
			n, err := strconv.ParseUint(h, 16, 64)
			if err != nil {
				return nil, outcome.Refused.Mark(fmt.Errorf("%w: the ledger's open key %s has a malformed row hash %q", change.ErrTargetMismatch, o.Shown, h))
			}
			s.Others = append(s.Others, n)
		}
		seeds[string(k)] = s
	}
	return seeds, nil
}
