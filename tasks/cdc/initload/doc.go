// Package initload copies tables from an exported snapshot in parallel
// chunks: each table cut into ctid ranges of pages, the chunks read at
// once by several connections under the same snapshot with COPY … TO
// STDOUT, each row decoded through the table's decoders into its mapped
// columns and handed over in blocks. It takes plain values (Config: the
// source's connection config, the snapshot, the workers; Table: the
// columns, decoders and the chunks earlier runs did) and calls back per
// block (Table.Insert), per finished chunk (Table.Record) and per loaded
// table (Table.Loaded): the caller writes, records and counts, so loading
// one table again, into its target or into a new table beside it, is one
// call of Load. It knows nothing of slots, ledgers or locks. How the load
// is consistent with the stream after it, continued after a kill, and how
// fast it is: docs/initial-load.md.
package initload
