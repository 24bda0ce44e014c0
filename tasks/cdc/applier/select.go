package applier

import (
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/merge"
)

// Selection is what SelectPending chose, and the source the ledger
// records for a batch not applied before.
type Selection struct {
	merge.Selection
	src change.SourceID
}

// SelectPending keeps the rows the target lacks or holds older
// (merge.SelectPending), and refuses a batch never applied before whose
// versions went backwards.
func (t *Table) SelectPending(rd Reading) (Selection, error) {
	m := t.M
	step := time.Now()
	var sel Selection
	var err error
	if sel.Selection, err = merge.SelectPending(m, rd.rows, rd.current, rd.prev); err != nil {
		return sel, err
	}
	if rd.led.Replay == nil {
		sel.src = t.Origin.Source()
		if err := merge.WentBackwards(m, rd.b, sel.src, sel.Selection, rd.led); err != nil {
			return sel, err
		}
		if err := merge.UnplacedAfter(m, sel.Selection); err != nil {
			return sel, err
		}
	}
	if err := merge.CheckFilled(m, sel.Pending); err != nil {
		return sel, err
	}
	if err := merge.CheckShown(m, t.Tbl.LastShown(), sel.Pending); err != nil {
		return sel, err
	}
	t.Res.Pending += int64(len(sel.Pending))
	t.Res.Skipped += int64(len(rd.rows) - len(sel.Pending))
	t.Res.Deletes += sel.Deletes
	t.Res.Read += time.Since(step)
	return sel, nil
}
