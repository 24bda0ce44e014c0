// Package slot is cdc sync's source: it reads a PostgreSQL logical
// replication slot itself, with the server's built-in pgoutput plugin
// (protocol version 1), and hands over whole committed transactions, in
// commit order, as a stream of events. It knows nothing of mappings or
// targets; it imports only pgx, pglogrepl and internal/outcome.
//
// # Use
//
//	res, err := slot.Ensure(ctx, pg, slot.Setup{Slot: "orders_sync", Publication: "orders_pub",
//		Tables: tables, ExportSnapshot: true})
//	// a new slot: copy the tables under res.Snapshot.Begin(ctx, conn), then res.Snapshot.Release()
//	st, err := slot.Start(ctx, pg, slot.StreamConfig{Slot: "orders_sync", Publications: []string{"orders_pub"},
//		IdleTimeout: time.Second, ActiveWait: 30 * time.Second})
//	defer st.Close()
//	for {
//		ev, err := st.Next(ctx) // KindBegin, changes with ev.Relation, KindCommit, ...
//		// batch whole transactions; after every target's read-back passed:
//		st.Confirm(ctx, lastCommit.End)
//	}
//
// Ensure creates the publication (FOR TABLE, or FOR ALL TABLES when asked)
// and then the slot when they are missing, and refuses what cannot be
// streamed exactly: wal_level other than logical, a role without
// REPLICATION, a slot of another plugin or database, a slot another
// process streams from (naming its pid), a slot whose WAL is gone
// (wal_status lost), a table whose replica identity does not identify its
// rows, a publication that leaves out operations or tables or filters
// rows. It never drops anything. Creating a slot waits for the
// transactions running when it began to end; given Setup.Log, Ensure says
// every few seconds which ones (running: pid, state, age, database;
// prepared: gid), as ExportTemporaryLogged does for a temporary slot.
// ReadHealth reports a slot's positions, lag and retained WAL for outputs
// and metrics.
//
// # Exactly once: confirm only after the read-back
//
// A slot remembers one position, confirmed_flush_lsn: a new stream
// delivers every transaction whose commit record comes after it
// (Commit.LSN >= confirmed) and none before. The stream reports to the
// server only the position the caller passes to Confirm, as the write,
// flush and apply positions alike, never what was merely received. So the
// caller confirms a transaction's Commit.End only after that transaction,
// and every one before it, is applied to every target and its read-back
// passed. A crash anywhere before the confirm re-delivers the transaction
// on the next run; one after it cannot lose it.
//
// The slot itself is at least once, not exactly once: the server writes
// confirmed_flush_lsn to disk at checkpoints, so after a crash of
// PostgreSQL a slot can re-deliver transactions that were confirmed; a
// confirm lost with the connection has the same effect. The targets make
// it exactly once: rows are versioned by their position in commit order,
// so a re-delivered transaction changes nothing, and the ledger says what
// was applied. The other direction is what must never happen: a slot
// ahead of what the targets hold (another consumer confirmed it) is a
// gap, which the caller detects by comparing the slot's Health with its
// ledger before it streams.
//
// # What a slot retains
//
// While it exists, a slot keeps the server from removing WAL after its
// restart_lsn (the start of the oldest transaction still running at the
// confirmed position) and from vacuuming catalog rows its decoding may
// need (catalog_xmin). An unread slot therefore fills the source's disk
// until max_slot_wal_keep_size, when set, invalidates it (wal_status
// lost: its changes are gone; Ensure and Start refuse it, and the targets
// must be reloaded from a new slot's snapshot). Health.RetainedBytes is
// what a slot keeps now, Health.SafeWALSize how much more it may keep.
//
// A publication that is quiet while other tables or databases write would
// retain all of that WAL if the caller only ever confirmed commits: no
// commit of the publication comes to confirm. The server's keepalives say
// how far it has decoded; Stream.IdlePosition offers that position, and
// Confirm accepts it, only when confirming it is safe:
//
//   - no transaction is open in the stream, and every transaction the
//     stream delivered has been confirmed (nothing after the last confirmed
//     commit is in flight here);
//   - the keepalive came between transactions, after every commit
//     delivered: the server has decoded all WAL before its position and
//     delivered every transaction of the publication that commits before
//     it. A transaction still running on the server commits after that
//     position, so a restart from it still delivers it.
//
// Before such a confirm the caller records the position where its gap
// check reads it (the ledger), since the slot then moves without a commit.
//
// # What pgoutput guarantees, and what this package checks
//
//   - A transaction is sent when its commit is decoded, whole: Begin, then
//     its changes in WAL order, then Commit. Transactions arrive in commit
//     order, so Commit.LSN grows; PostgreSQL 15 sends no empty ones. The
//     stream refuses (ErrProtocol) a change outside a transaction, a
//     Commit that does not close the transaction begun, commits that go
//     back, a change of a relation never described, a tuple whose width is
//     not its relation's.
//   - A Relation message precedes a table's first change in a session and
//     follows any change to its definition; the stream keeps the relation
//     in effect (Event.Relation) and reports the difference from the one it
//     replaces (Event.Schema: columns added, dropped, retyped, key and
//     identity changes; a rename is a drop and an add). Pass
//     Stream.Relations to the next stream so a restart keeps comparing.
//   - Values arrive in PostgreSQL's text output, exactly: NULL is
//     ValueNull even where the column has a DEFAULT; NaN and ±infinity are
//     the strings PostgreSQL writes; an unchanged TOASTed value is
//     ValueUnchanged (under REPLICA IDENTITY FULL the old image holds it);
//     an UPDATE carries the old key (OldKey) when it changed the key, or
//     the whole old row (OldFull) under REPLICA IDENTITY FULL; a DELETE
//     carries one of them. TRUNCATE arrives (publications publish it by
//     default; Ensure refuses one that does not).
//   - The publication must predate every change the slot decodes: pgoutput
//     reads it as of each change, and a change committed before it existed
//     fails the stream ("publication does not exist"). Ensure creates the
//     publication before the slot, and refuses a slot whose publication is
//     missing (ErrSlotWithoutPublication).
//
// # Choices
//
// Protocol version 1, not 2's streaming of in-progress transactions: the
// caller applies whole committed transactions, so streamed ones would
// have to be held (and their aborts handled) on the client; under version
// 1 the server holds them and spills a large one to disk
// (logical_decoding_work_mem). Values are text: binary mode was measured
// with .ci/bench-slot and does not pay (the server's decoding is the
// limit), and text is exact for every type.
//
// The stream decodes every message without allocating: an Event, its
// tuples and their values point into the receive buffer and are reused,
// valid until the next call of Next, so memory stays bounded by the
// largest message whatever the transaction's size. Relations are
// allocated once per Relation message and never changed.
//
// Deadlines: every call takes a context; Next also returns KindIdle after
// StreamConfig.IdleTimeout without a message between transactions. The
// server ends a stream it has not heard from for wal_sender_timeout (60 s
// by default): a caller busy for long calls Heartbeat. A lost connection
// is ErrConnLost (transient): the open transaction is incomplete, and a
// new Stream resumes from the confirmed position.
//
// Errors name the slot, table and LSN concerned, wrap a sentinel of
// errors.go, carry their outcome class (refused, config, transient,
// internal), and Hint gives the remedy of each for the task's hints
// table. docs/cdc-slot.md describes the slot for operators.
package slot
