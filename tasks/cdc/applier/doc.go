// Package applier is the shared writer of cdc apply and cdc sync: one
// merged batch (merge.Batch) into one target, under the target's lock, read
// back and recorded in the target's ledger. A Table runs the steps
// ReadTarget (the ledger: a replay? what does this batch follow?; the
// target's rows of the batch's keys, for unchanged TOAST values, versions,
// key changes and a TRUNCATE's deletes), SelectPending, Insert (fenced by
// the lock), Verify (every key read back) and Record (the ledger row,
// fenced); cdc apply writes its output files between them, cdc sync runs
// them together (Table.Apply) for each table of a flush. Where a batch
// comes from is its Origin (a trigger's file, the replication slot).
//
// It also holds what both commands need around those steps: the lock
// helpers (LockFirst, GiveBack) and the stop-step bookkeeping a stopped
// run's message reads (Stop). It imports the layers below (change, mapping,
// merge, target) and nothing of the commands: neither slotsync nor
// initload. How the steps keep exactly-once and what each refuses:
// docs/cdc.md.
package applier
