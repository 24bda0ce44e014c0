package merge

import (
	"fmt"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// CheckShown refuses a pending row holding a Date or DateTime the server
// stores but does not show (caps: ClickHouse 18.16 reads the top of their
// ranges back as 1970), naming the row and the column: written, it would
// pass the read-back (the driver reads the stored number) and be wrong in
// every query.
func CheckShown(m *mapping.Mapping, caps mapping.ServerCaps, pending []*change.Row) error {
	if caps.DateDays == 0 && caps.DateTimeSeconds == 0 {
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
			var last uint64
			var shown string
			switch k := m.Cols[i].Type.Kind; {
			case k == mapping.KindDate && caps.DateDays != 0:
				last, shown = caps.DateDays, time.Unix(int64(caps.DateDays)*86400, 0).UTC().Format(time.DateOnly)
			case k == mapping.KindDateTime && caps.DateTimeSeconds != 0:
				last, shown = caps.DateTimeSeconds, time.Unix(int64(caps.DateTimeSeconds), 0).UTC().Format(time.DateTime)+" UTC"
			default:
				continue
			}
			if int64(v.N) > int64(last) {
				e := rowError(m, r, fmt.Errorf("%w: this server stores it but shows nothing after %s (it reads back as 1970)",
					change.ErrNotShown, shown))
				e.Column = m.Cols[i].Name
				return outcome.Refused.Mark(e)
			}
		}
	}
	return nil
}
