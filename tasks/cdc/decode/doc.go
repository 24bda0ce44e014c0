// Package decode reads the batches Kestra's Debezium PostgreSQL trigger
// writes (Ion, text from Kestra 1.x and binary from 2.x) into change.Rows,
// checked against the mapping, handing them to a sink in file order. Text
// is cut at lines and binary at version markers, and segments are decoded
// by workers with the fast record reader (internal/ionrec), ion-go reading
// what it cannot; input that cannot be cut is decoded as one stream. It
// never merges rows or talks to ClickHouse.
package decode
