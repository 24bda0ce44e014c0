// Package cdc applies Debezium change batches, captured from PostgreSQL by
// Kestra's Debezium trigger, to a ClickHouse ReplacingMergeTree versioned by
// the source LSN, and verifies every batch by reading it back. It replaces
// the nine tasks of the seed flow postgres-clickhouse-cdc (IonToJson, three
// Python scripts, two reads, JsonToIon, a bulk insert) with one command, and
// works for any table a Mapping describes.
//
// # What it reads
//
// A batch file written by io.kestra.plugin.debezium.postgres.Trigger with
// format INLINE, deleted ADD_FIELD, metadata ADD_FIELD and splitTable OFF:
// one Ion struct per change holding the row image (the before image for a
// delete), `deleted` (bool) and `metadata` {operation, timestamp, source
// {db, schema, table, lsn, txId, snapshot, ...}}. Both forms Kestra writes
// are read, told apart by the first bytes: text Ion with one value per line
// (Kestra 1.x) and binary Ion with a version marker before each row (Kestra
// 2.x). Decoding streams: the file is cut into segments of whole lines (or
// of whole version-marked chunks; internal/batchfile) that workers decode
// in parallel, merged in file order, so memory holds the latest row of each
// key, not the batch. (A key whose events arrive out of LSN order, which a
// trigger batch does not produce, costs a second pass over the file that
// hashes that key's versions.) Binary values are framed before anything
// decodes them, so a garbled length cannot make a decoder allocate
// gigabytes.
//
// A record's path reads one way: its bytes are read into a record
// (record.go) of scalars by field, the record is checked in the seed's
// order (finish), each column's scalar is read, checked and encoded by its
// column type (convert, column.go), and the result is a row. The bytes are
// read by internal/ionrec, a reader of exactly the shapes Kestra writes
// (binary: a version marker and a local symbol table before each record,
// identical tables recognised by their bytes and reused; text: one struct
// per line), without reflection or per-value allocation, Debezium's
// {scale, value} struct of an unconstrained numeric included. Whatever it
// does not recognise (another nested value in a column, a repeated field, a top-level
// annotation, a symbol table with imports, comments, numbers beyond 64
// bits, ...) goes to ion-go for that chunk or line, so the accepted
// language stays exactly Ion's as ion-go reads it; FuzzDecode holds the two
// paths to the same rows and the same refusals. A record keeps, besides
// the columns, metadata.operation, metadata.source.{snapshot, sequence,
// txId} and whether it carried the delete marker, as read (row.change).
//
// Value shapes (see convert), as the real trigger writes them
// (harness/debezium/FINDINGS.md §2): Ion ints (smallint, integer, bigint),
// decimals with the column's scale (numeric(p,s): 12.50), Debezium's
// {scale, value} struct (unconstrained numeric; accepted by Decimal
// columns and by String columns with source_type numeric), floats (real
// widened from float32, double precision), bools, strings (text, varchar,
// jsonb, uuid in lower case, date as YYYY-MM-DD, timestamp as UTC with Z and
// six fraction digits from Kestra 2.x or as few as needed from 1.x,
// timestamptz likewise in the worker JVM's zone, Z or +01:00), blobs
// (bytea). Read too, for other producers: symbols, day timestamps for
// dates, millisecond timestamps, annotated strings ZonedDateTime::"…",
// OffsetDateTime::"…" and LocalDateTime::"…" (read in the column's time
// zone), explicit nulls. A value that does not fit its column is refused,
// never rounded: more decimal places than the scale, more sub-second
// digits than the precision (a timestamp with microseconds into DateTime),
// a double that is not a float32.
//
// A column's optional source_type (the PostgreSQL type, pgType) restricts
// the ClickHouse types it may be mapped to (a mapping error names what to
// map it to), and makes a String column hold the value in one exact text:
// a timestamp or timestamptz as YYYY-MM-DD hh:mm:ss.ffffff in UTC (what
// ClickHouse 18.16, which has no DateTime64, can hold to the microsecond;
// the same text whatever form the trigger wrote), a date as YYYY-MM-DD, a
// numeric as its exact decimal text, a uuid in lower case.
//
// # The checks, and the seed rule each implements
//
// Every refusal names the record number (1-based), the text line, the key
// and the LSN when known, and the column; nothing is written to ClickHouse
// when a record is refused, because the whole batch is validated first.
//
//   - a field that is not a mapped column, the delete marker or metadata:
//     ErrSourceChanged (seed: "Source columns changed");
//   - metadata.source db/schema/table other than the mapping's:
//     ErrWrongSource (seed: "Expected changes from public.orders ...");
//   - metadata.source.lsn not an integer in 1..2^64-1: ErrBadLSN;
//   - a key that is absent, null or does not fit: ErrMissingField/ErrBadValue
//     (seed: integer(event["id"], "id"));
//   - a mapped column absent from a create/update/read event: NULL when the
//     column is Nullable (the trigger serializes with NON_NULL inclusion, so
//     a NULL column is left out), else ErrMissingField saying the source
//     value was NULL (seed: event["customer_id"] raises KeyError);
//   - deleted present but not a real boolean: ErrBadDeleteMarker (absent
//     means false, as event.get("deleted", False));
//   - integers out of their column's range, or not integers (Ion keeps bools
//     apart; a decimal without fraction digits, 5., is accepted because the
//     seed accepts what IonToJson makes of it): ErrBadValue;
//   - strings longer than max_length in code points (Python's len):
//     ErrBadValue (seed: len(status) > 32);
//   - the TOAST placeholder __debezium_unavailable_value (a string, a
//     symbol, or a blob for a bytea) in any column: in an update it means
//     the value did not change, and is taken from the key's previous event
//     in the batch or else the target's current row (toast.go); ErrToast in
//     a create or read event, in a key, and when neither holds the previous
//     version (seed: status only, always refused);
//   - an empty batch: ErrEmptyBatch; a TRUNCATE event: ErrTruncate.
//
// Deletes carry the key; their other columns are not read and are written
// as the seed writes them: 0 and "" (and NULL in Nullable columns, the zero
// date, UUID and decimal otherwise).
//
// # What it writes
//
// The latest event per key by LSN is kept; two events with one key and LSN
// must be identical (ErrConflict). Before the target is compared, the
// unchanged TOAST values the batch could not fill are read from the
// target's rows of those keys (fillFromTarget). The target's winning version of only this
// batch's keys is read with FINAL, the keys sent as an external table and
// used as a PREWHERE (they are the sorting key, so FINAL merges only the
// batch's rows): first the versions alone, then the payloads of the keys
// the target holds at the batch's own LSN.
// Pending keys are those absent from the target or older there; an equal
// LSN with a different payload in the target is refused (ErrTargetConflict),
// an equal one is a replay and skipped. Pending rows are inserted with
// native INSERT blocks naming every column, one columnar append per column.
// Then every captured key is read back (FINAL): it must hold this exact
// payload at this LSN or a newer version (ErrVerify). Only then are the
// output files published: expected.jsonl (every key's latest row) and
// pending.jsonl (the rows written), sorted by key, each line exactly what
// the seed's json.dumps(row, ensure_ascii=False) writes.
//
// # Delivery
//
// At least once, idempotent: a re-run of the same batch, of an older batch,
// or of a batch whose insert landed but whose verify did not run converges,
// because rows are versioned by LSN and duplicate (key, LSN) rows collapse
// under FINAL. Refusals are marked outcome.Refused, mapping and target
// mismatches outcome.Config, lost or unreachable servers
// outcome.Transient.
//
// # ClickHouse versions
//
// The minimum is 18.16 (the Debian package): every statement is built for
// it (columns named in INSERT, keys in an external table, no server-side
// parameters, only int and bool settings). On a server of 21.12 or newer a
// Bool column is created as Bool (UInt8 before); DateTime64 columns need
// 20.1 or newer and are refused by setup and apply on older servers
// (ErrUnsupportedServer; use DateTime for whole seconds, or String with
// source_type timestamp for microseconds), and so are Decimal columns of
// more than 38 digits (Decimal256) before 21.6 (String with source_type
// numeric holds any numeric).
//
// # Deliberate differences from the seed
//
//   - Any table: columns, types, limits and names come from the mapping, not
//     from a script edited per table.
//   - Every column is checked for the TOAST placeholder, not only status,
//     in every form; an update's placeholder is filled with the previous
//     value instead of refused (toast.go); deletes still ignore their image.
//   - A TRUNCATE event is refused with its own error (the seed fails on the
//     missing id); an unknown field, a repeated field or a value of the wrong
//     Ion type is refused with the record number, key, LSN and column.
//   - Values are never rounded: a decimal with more places than the scale, a
//     time with more digits than the precision, a double that is not a
//     float32 are refused.
//   - NaN equals NaN when payloads are compared (Python's == says it does
//     not, which would turn a replay of a NaN row into a conflict).
//   - The whole batch is validated before the target table is read or
//     written (the connection and the schema check run meanwhile); the keys are
//     sent as an external table (the seed pastes them into the SQL, which
//     ClickHouse 18.16 refuses from 50,000 keys, max_ast_elements, or sooner
//     when the list passes max_query_size, 256 KiB); the output files and
//     outputs appear only after the verify passed.
//   - The outputs add verified and drop ids_sql.
package cdc
