// Package mapping reads the cdc mapping file: one source table of
// PostgreSQL, its ClickHouse target (database, table, live view, version
// and delete-marker columns) and its columns with their ClickHouse types and
// PostgreSQL source types. It checks the file strictly (unknown keys, bad
// identifiers and types are refused with their line and column) and names
// the objects derived from the target (ledger, lock), quoting identifiers
// in one place. It does no I/O but reading the file.
package mapping
