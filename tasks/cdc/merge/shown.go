package merge

import (
	"fmt"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// CheckShown refuses a pending row holding a Date or DateTime the server
// stores but does not show (ClickHouse 18.16 reads the top of their
// ranges back as 1970), naming the row and the column: written, it would
// pass the read-back (the driver reads the stored number) and be wrong in
// every query. last is, per column of m, the last value shown (days for a
// Date, Unix seconds for a DateTime; 0 or a nil last: no limit).
func CheckShown(m *mapping.Mapping, last []uint64, pending []*change.Row) error {
	if last == nil {
		return nil
	}
	for _, r := range pending {
		if r.Deleted {
			continue
		}
		for i := range m.Cols {
			v := r.Vals[i]
			if v.Null {
				continue
			}
			if last[i] == 0 {
				continue
			}
			var shown string
			switch m.Cols[i].Type.Kind {
			case mapping.KindDate:
				shown = time.Unix(int64(last[i])*86400, 0).UTC().Format(time.DateOnly)
			case mapping.KindDateTime:
				shown = time.Unix(int64(last[i]), 0).UTC().Format(time.DateTime) + " UTC"
			default:
				continue
			}
			if int64(v.N) > int64(last[i]) {
				e := rowError(m, r, fmt.Errorf("%w: this server stores it but shows nothing after %s (it reads back as 1970)",
					change.ErrNotShown, shown))
				e.Column = m.Cols[i].Name
				return outcome.Refused.Mark(e)
			}
		}
	}
	return nil
}
