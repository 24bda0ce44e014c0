package cdc

import (
	"bufio"
	"fmt"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/applier"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// outputs are expected.jsonl and pending.jsonl, written before the insert
// and published after the verify.
type outputs struct {
	expected, pending *kestra.File
}

// writeOutputs waits for expected.jsonl and writes pending.jsonl.
func (r *applyRun) writeOutputs(sel applier.Selection) (outputs, error) {
	exp, err := r.expected.wait()
	if err != nil {
		return outputs{}, err
	}
	pend, err := writeRows(r.env.Dir, PendingFile, r.cfg.Mapping, sel.Pending)
	if err != nil {
		return outputs{}, err
	}
	return outputs{expected: exp, pending: pend}, nil
}

// abort removes the files unless they were published.
func (o outputs) abort() {
	if o.pending != nil {
		o.pending.Abort()
	}
}

// publish renames the files into place. A failure leaves the target right;
// only the task's outputs are missing.
func (r *applyRun) publish(o outputs) error {
	for _, f := range []*kestra.File{o.expected, o.pending} {
		if err := f.Commit(); err != nil {
			return outcome.Transient.Mark(fmt.Errorf("%w: publish the output files in %s: %w", errNotPublished, kestra.EnvWorkingDir, err))
		}
	}
	return nil
}

// backgroundFile is an output file written by its own goroutine.
type backgroundFile struct {
	done chan struct{} // closed when f and err are set
	f    *kestra.File
	err  error
}

// writeInBackground starts writing rows into the not-yet-published output
// file name (writeRows).
func writeInBackground(dir kestra.Dir, name string, m *mapping.Mapping, rows []*change.Row) *backgroundFile {
	w := &backgroundFile{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.f, w.err = writeRows(dir, name, m, rows)
	}()
	return w
}

// wait returns the written file, or why it could not be written.
func (w *backgroundFile) wait() (*kestra.File, error) {
	<-w.done
	return w.f, w.err
}

// abort waits for the write and removes the file unless it was published;
// a nil w is no file.
func (w *backgroundFile) abort() {
	if w == nil {
		return
	}
	if f, _ := w.wait(); f != nil {
		f.Abort()
	}
}

// writeRows writes rows as JSON lines into a not-yet-published output file.
func writeRows(dir kestra.Dir, name string, m *mapping.Mapping, rows []*change.Row) (*kestra.File, error) {
	f, err := dir.Create(name)
	if err != nil {
		return nil, outcome.Config.Mark(fmt.Errorf("%w: %w", change.ErrConfig, err))
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var line []byte
	for _, r := range rows {
		line = change.AppendJSON(line[:0], m, r)
		line = append(line, '\n')
		if _, err := w.Write(line); err != nil {
			f.Abort()
			return nil, outputFileErr(name, err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Abort()
		return nil, outputFileErr(name, err)
	}
	return f, nil
}

// outputFileErr is a failed write of an output file, which happens before
// the insert: a full disk (or a file-size limit) in the working directory,
// not a bug.
func outputFileErr(name string, err error) error {
	return outcome.Transient.Mark(fmt.Errorf("%w: write %s in %s: %w", errOutputFiles, name, kestra.EnvWorkingDir, err))
}
