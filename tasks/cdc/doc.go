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
// key, not the batch. (A key whose events arrive out of version order,
// which a trigger batch does not produce, costs a second pass over the file
// that hashes that key's versions.) Binary values are framed before
// anything decodes them, so a garbled length cannot make a decoder allocate
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
// paths to the same rows and the same refusals. Where ion-go reads text
// into a changed value (a surrogate pair of \u escapes as two U+FFFD, a
// lone surrogate as one), internal/ionesc mends the text before ion-go
// reads it: the pair is its character, the lone surrogate refused. A
// record keeps, besides the columns, metadata.operation,
// metadata.source.txId and lsn, the sequence's lsn_commit (a sequence
// naming another LSN is refused), whether it carried the delete marker,
// and an xxHash64 of all that
// (row.change); the batch's digest is SHA-256 over those hashes in file
// order. A snapshot row is a READ without lsn_commit. The source's identity
// the ledger records (metadata.source connector, name, version, db) is
// read once, from the batch's first event.
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
// zone; a time the zone skips or repeats at a daylight saving change is
// refused), explicit nulls. A value that does not fit its column is refused,
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
//   - metadata.source.txId present, not null and not an integer in
//     0..2^63-1: ErrBadTxID (changesink's own; absent is a change without a
//     transaction id);
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
//   - an event that contradicts itself: metadata.operation DELETE with
//     deleted false or absent, CREATE/UPDATE/READ with deleted true, an
//     operation Debezium does not send, a TRUNCATE with row columns, a
//     metadata.source.sequence naming another LSN than source.lsn, a
//     transaction whose consecutive events carry two lsn_commit values, an
//     lsn_commit below an earlier event's (transactions arrive in commit
//     order), two
//     changes of a transaction tied at its floor whose LSNs go down (the
//     records reordered): ErrContradiction (the seed applies what the
//     marker says);
//   - an empty batch: ErrEmptyBatch.
//
// Deletes carry the key; their other columns are written as the seed
// writes them: 0 and "" (and NULL in Nullable columns, the zero date, UUID
// and decimal otherwise). Their before image is read only to tell which
// row a delete removed when a key has two (key changes, below).
//
// # Versions: commit order
//
// The seed versions a row by source.lsn, the WAL position of the change
// record. That is not the order changes committed in (Debezium's
// maintainers say so, debezium#7764), and the real batches show where it
// breaks (harness/debezium/FINDINGS.md §3, overlap_stream): a transaction
// that begins while the slot is being built (snapbuild.c: FULL_SNAPSHOT)
// and commits after it is consistent is decoded in full but is not in the
// snapshot; its UPDATE of key 1 streams at LSN 51884231336 after the
// snapshot's READ of key 1 at 51884232048, so "highest LSN wins" keeps
// the stale snapshot row. Within a batch the file order is right: pgoutput
// sends each transaction whole at its commit, in commit order (the
// reorder buffer), and the snapshot's rows come first.
//
// changesink's version (order.go) follows PostgreSQL's commit order:
//
//	streamed change of transaction T: max(source.lsn, F + 1)
//	snapshot READ row:                source.lsn (the snapshot's point S)
//
// where F, T's commit floor, is the first element of
// metadata.source.sequence, Debezium's lsn_commit: the end of the last
// COMMIT the connector processed before T (FINDINGS §3: the same for all
// of T's changes, null until the first commit after a snapshot, carried in
// the trigger's offsets). For the first transaction after a snapshot
// (lsn_commit null), F is the snapshot's LSN: from the batch's own READ
// rows, else from the ledger (the snapshot an earlier batch applied). Every
// version of T then lies in (F, commit(T)), and the next transaction's F is
// at least commit(T): versions increase with commit order across
// transactions and with change order inside one, and snapshot rows sit
// between what they contain and what follows. The number fits the seed's
// `_cdc_lsn UInt64` and compares correctly with the LSNs the seed wrote (a
// row's version is never below its LSN, and below its transaction's
// commit), so a target the seed flow made keeps working without a
// migration. A batch without sequences (hand-made) is versioned by its
// LSNs, as the seed did.
//
// Changes of one transaction written before its floor (a long transaction
// that another one overtook) share F + 1. Two of them to one key in a
// batch: the later in the file wins (a floor tie). The trigger can cut a
// transaction between batches (maxRecords); the second batch's change then
// meets the first's in the target at the same version, and replaces it when
// the ledger's last batch ended in that transaction (ReplacingMergeTree
// keeps the last insert of a version: `>=` in
// ReplacingSortedBlockInputStream, checked on 18.16 by
// TestReplacingKeepsLastInsertOfAVersion). Any other equal version with
// another payload is refused, as the seed does.
//
// Per key, streamed changes of different transactions already come in LSN
// order (a row lock, or a unique index check, is held to commit), so the
// version changes the seed's order only where it was wrong: the overlap
// above, and keys whose two rows coexist inside one transaction.
//
// # Key changes
//
// A DEFERRABLE primary key swapped or shifted in one transaction (UPDATE …
// SET id = CASE id WHEN 6 THEN 7 WHEN 7 THEN 6 END) arrives as DELETE 6 /
// CREATE 7 at one LSN and DELETE 7 / CREATE 6 at the next (FINDINGS §3,
// pkswap): key 7 is created while its old row is live, and by LSN its
// delete wins. The batch follows such a key's physical rows (batch.go): a
// CREATE of a key the batch or the target holds live gives it two rows; a
// delete in the same transaction removes the one its before image names
// (REPLICA IDENTITY FULL: "seven", so the new "six" stays). What the batch
// cannot tell is refused naming the key (ErrKeyChange): a delete with only
// the key (REPLICA IDENTITY DEFAULT), an update of a key with two rows, a
// transaction that ends with two, a CREATE of a key the target holds live
// with no delete of the old row (also what a TRUNCATE the trigger dropped
// looks like). When the batch ends inside that transaction, the ledger
// carries the key to the next batch, which must continue the transaction.
//
// # TRUNCATE
//
// With Debezium's default skipped.operations=t (the seed's trigger) a
// TRUNCATE never reaches the batch: changesink cannot see it, and the rows
// it removed stay. With skipped.operations: none it arrives as a record
// without columns: every key older than it is deleted, those of the batch
// and those the target holds live (a delete marker at its version each, in
// the same insert).
//
// # What it writes
//
// The events are merged by version (above); two events with one key and
// version must be identical (ErrConflict), except a floor tie. Under the
// target's lock (lock.go) the ledger is read (ledger.go); the unchanged
// TOAST values the batch could not fill are read from the target's rows of
// those keys (fillFromTarget); then the target's winning version of only
// this batch's keys is read, with FINAL, the keys sent as an external
// table and used as a PREWHERE (they are the sorting key, so FINAL merges
// only the batch's rows): first the versions and delete markers alone,
// then the payloads of the keys the target holds at the batch's own
// version.
// Pending keys are those absent from the target or older there; an equal
// version with a different payload in the target is refused
// (ErrTargetConflict), an equal one is a replay and skipped. A batch that
// was never applied (its digest is not in the ledger), with no key newer
// than the target and none the same as a row it holds but some older, is
// refused (ErrWentBackwards): a source restored, migrated or failed over
// with other LSNs looks exactly so, and skipping it would lose its changes.
// Pending rows are inserted in one native INSERT block naming every column,
// one columnar append per column: one part of a table without PARTITION BY,
// visible all at once. Then every captured key is read back (FINAL): it
// must hold this exact payload at this version or a newer version
// (ErrVerify). Then the ledger row is written, the lock released, and the
// output files published: expected.jsonl (every key's latest row) and
// pending.jsonl (the rows written), sorted by key, each line exactly what
// the seed's json.dumps(row, ensure_ascii=False) writes.
//
// # Delivery
//
// At least once, idempotent: a re-run of the same batch (its digest is in
// the ledger: a replay, skipped and verified), or of a batch whose insert
// landed but whose verify or ledger row did not, converges, because rows
// are versioned and duplicate (key, version) rows collapse under FINAL. A
// run stopped before the insert committed nothing; after it, the whole
// batch is in the target, not yet in the ledger (the re-run finds every key
// replayed and records it). Refusals are marked outcome.Refused, mapping and
// target mismatches outcome.Config, lost or unreachable servers and a
// lock held by another run outcome.Transient.
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
//     value instead of refused (toast.go); deletes still ignore their image
//     but to tell a key's two rows apart.
//   - The version follows commit order (above): the snapshot overlap and key
//     swaps come out right; _cdc_lsn is the LSN or just above a commit floor.
//   - A TRUNCATE event deletes every older key (the seed fails on the
//     missing id); a contradicting event is refused (the seed applies the
//     marker); a never-applied batch that went backwards is refused (the
//     seed skips it); an unknown field, a repeated field or a value of the
//     wrong Ion type is refused with the record number, key, LSN and column.
//   - A ledger table and, while a run holds it, a lock table sit next to the
//     target (<table>_ledger, <table>_lock); cdc apply needs CREATE, DROP and
//     RENAME TABLE, INSERT and SELECT in the target's database.
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
