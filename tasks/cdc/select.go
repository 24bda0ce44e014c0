package cdc

import (
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/merge"
)

// selection is what selectPending chose, and the source the ledger
// records for a batch not applied before.
type selection struct {
	merge.Selection
	src change.SourceID
}

// selectPending keeps the rows the target lacks or holds older
// (merge.SelectPending), and refuses a batch never applied before whose
// versions went backwards.
func (t *tableRun) selectPending(rd reading) (selection, error) {
	m := t.m
	step := time.Now()
	var sel selection
	var err error
	if sel.Selection, err = merge.SelectPending(m, rd.rows, rd.current, rd.prev); err != nil {
		return sel, err
	}
	if rd.led.Replay == nil {
		sel.src = t.origin.source()
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
	if err := merge.CheckShown(m, t.tbl.LastShown(), sel.Pending); err != nil {
		return sel, err
	}
	t.res.Pending += int64(len(sel.Pending))
	t.res.Skipped += int64(len(rd.rows) - len(sel.Pending))
	t.res.Deletes += sel.Deletes
	t.res.Read += time.Since(step)
	return sel, nil
}
