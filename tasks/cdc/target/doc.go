// Package target is cdc's ClickHouse adapter: it connects (and tells a
// wrong port or protocol from a lost server), creates and checks the target
// table, its live view and its ledger, reads the winning rows of a set of
// keys (FINAL, the keys in an external table), inserts a batch in one
// block, keeps the ledger of applied batches and the one-writer lock, and
// classifies ClickHouse's errors. It never decodes a batch or decides what
// to apply.
package target
