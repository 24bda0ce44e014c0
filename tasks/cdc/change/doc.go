// Package change is cdc's change model, shared by every layer above it: a
// Row is one captured change (or a target's row) in canonical form, its
// Values compared exactly whatever decoded them; Meta is what the event
// said of its place in the source's history; a row's Version follows
// PostgreSQL's commit order (order.go). It declares the refusals every
// layer raises (errors.go, RecordError locating one in a batch) and the
// rows of the ledger that records each applied batch. It does no I/O.
package change
