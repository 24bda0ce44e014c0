package cdc

import (
	"errors"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/pgvalue"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// Hint returns what to do about err, a failure of any cdc command: the
// remedy of the most specific cause err wraps, or "" when it has none.
// The CLI prints it apart from the error (a "hint:" line and the hint
// output); docs/runbook.md has a section for each, holding the same text.
func Hint(err error) string {
	for _, h := range hints() {
		if errors.Is(err, h.err) {
			return h.text
		}
	}
	// The replication slot's own causes (docs/cdc-slot.md has them).
	return slot.Hint(err)
}

// hint is the remedy of one cause.
type hint struct {
	err  error
	text string
}

// syncStep is the step the remedies of a value cdc sync refuses end with.
const syncStep = "Then, for a table cdc sync holds, run cdc setup or sync once with CDC_RESYNC=<schema.table>: it loads the table " +
	"again and releases it (its changes were skipped since, the other tables' applied); for a load, re-run cdc setup."

// Replay is the step every input refusal's remedy ends with.
const replayStep = "Nothing was written. After a failed execution the trigger stops and its offsets are saved: " +
	"repair, re-run the execution with the saved batch as replay_file, then re-enable the trigger."

// hints is the table Hint reads, narrower causes before the errors they
// narrow.
func hints() []hint {
	return []hint{
		// Before the problems it wraps: several at once.
		{change.ErrPreflight, "Fix each problem the message numbers; changesink cdc check lists them with the remedy of each, " +
			"and creates nothing. Then run cdc setup again: nothing was created."},
		{change.ErrEmptyBatch, "Check the replay file: a trigger poll with no changes starts no execution."},
		{change.ErrMalformed, "The batch file is cut short, corrupt or not Ion: replay an intact copy of the trigger's batch " +
			"(a hand-made file: fix it; save it without a byte order mark). " + replayStep},
		{change.ErrNotStruct, "Check that the batch is the trigger's uris['data'] with format: INLINE. " + replayStep},
		{change.ErrSourceChanged, "Add the column to the mapping and to the target table (ALTER TABLE … ADD COLUMN), " +
			"drop the live view, re-run changesink cdc setup (it makes the view again), then replay the batch."},
		{change.ErrWrongSource, "Check the trigger's includedTables and database, and the mapping's source. " + replayStep},
		{change.ErrNotTriggerBatch, "Check that CDC_BATCH_FILE is the trigger's batch (trigger.uris['data']) and that the trigger " +
			"sets metadata: ADD_FIELD. " + replayStep},
		{change.ErrNotNullable, "Make the column Nullable(T) in the mapping and the target table (ALTER TABLE … MODIFY COLUMN), " +
			"or fix the source. " + replayStep},
		{change.ErrMissingField, "Check the trigger's deleted and metadata: ADD_FIELD settings and the mapping's field names. " + replayStep},
		{change.ErrBadLSN, "The batch was not written by the Debezium trigger: replay the original. " + replayStep},
		{change.ErrBadTxID, "The batch was not written by the Debezium trigger: replay the original. " + replayStep},
		{change.ErrBadDeleteMarker, "The batch was not written by the Debezium trigger: replay the original. " + replayStep},
		{change.ErrNotShown, "Map the column to a type the server shows the value in: DateTime64 (20.1+), or String with " +
			"source_type: date or timestamp; or upgrade the server (current releases show the whole Date and DateTime " +
			"range). Then replay the batch, or re-run cdc sync. Nothing was written."},
		{pgvalue.ErrSpecialValue, "Map the column to a type that holds NaN and infinity (Float64, or String with the source's " +
			"type as source_type), or keep them out of the source column. " + syncStep},
		{pgvalue.ErrOutOfRange, "Widen the column's type in the mapping and the target (a larger integer, a Decimal with more " +
			"digits, DateTime64 for dates beyond DateTime's range), or String with source_type. " + syncStep},
		{pgvalue.ErrWouldRound, "Give the column's type the source's precision in the mapping and the target (the Decimal's " +
			"scale, DateTime64's digits, Float64 for a double), or String with source_type. " + syncStep},
		{pgvalue.ErrTooLong, "Raise the column's max_length in the mapping, or remove it. " + syncStep},
		{pgvalue.ErrNotText, "Check that nothing changes the replication connection's settings (DateStyle, extra_float_digits, " +
			"bytea_output, client_encoding, IntervalStyle) in the role's or database's defaults; then re-run. " + syncStep},
		{pgvalue.ErrSettings, "Reset the setting the message names for the role or database changesink connects as " +
			"(ALTER ROLE … RESET …), or remove it from CDC_POSTGRES_DSN's options."},
		{pgvalue.ErrGeneratedColumn, "Leave the generated column out of the table's mapping entry (a view or query can compute it); then re-run."},
		{pgvalue.ErrNullable, "Map the column as Nullable(T) in the table's mapping entry (the message names T), then re-run."},
		{pgvalue.ErrWrongType, "Map the column to a type its PostgreSQL type fits (docs/mapping.md), or leave it out of the " +
			"mapping for the generated one, then re-run."},
		{pgvalue.ErrUnsupportedType, "Give the table a mapping that names the column as String, or Nullable(String) for a column that allows NULL (PostgreSQL's text of the value), or leave the column out of it."},
		{change.ErrBadValue, "Widen the column's type or limit in the mapping and the target (docs/mapping.md, PostgreSQL types), " +
			"or fix the source, then replay the batch. An unconstrained numeric ({scale, value}): Decimal(P, S), or " +
			"decimal.handling.mode: string on the trigger; a numeric(p,s): Decimal(p, s), or String with source_type: numeric; " +
			"a bytea: String; a timestamp with a fraction: DateTime64(6, 'UTC') on 20.1+, or String with source_type: timestamp; " +
			"a local time that does not exist or occurs twice: have the producer send the time with its offset. " + replayStep},
		{change.ErrToastAfterDelete, "The batch is inconsistent: inspect it; do not apply it."},
		{change.ErrToast, "Apply the trigger's earlier batches first, in order, then replay this one; with none to apply, rebuild " +
			"the target from a new snapshot. To stop placeholders at the source: ALTER TABLE … REPLICA IDENTITY FULL."},
		{change.ErrContradiction, "Replay the batch as the trigger wrote it (deleted and metadata: ADD_FIELD); a hand-made replay " +
			"file: fix it. " + replayStep},
		{change.ErrUnplaced, "Rebuild the target from a new snapshot (drop the table, its _ledger and the live view, run " +
			"changesink cdc setup, have the trigger take a new snapshot); do not drop the ledger by hand. Nothing was written."},
		{change.ErrWentBackwards, "After a restore, a migration or a failover of the source: rebuild the target (drop the table, " +
			"its _ledger and the live view, run changesink cdc setup) and have the trigger take a new snapshot (a new slotName " +
			"and stateName). An old batch replayed by mistake: do not apply it. Nothing was written."},
		{change.ErrNotLoaded, "Run changesink cdc setup with the same CDC_SLOT, CDC_PUBLICATION and CDC_TABLES: it creates the " +
			"slot and loads the tables from its snapshot, or continues a load that was cut; a table that joined the publication " +
			"since is loaded alone, the others untouched. A slot setup did not make: drop the slot " +
			"(SELECT pg_drop_replication_slot('<slot>')) and run the setup again, which loads every table again. Nothing was written."},
		{change.ErrOtherSource, "Point CDC_POSTGRES_DSN at the database the targets were loaded from, or give this source a " +
			"slot and targets of its own. After a restore or a failover to a new system: drop the slot and the targets, " +
			"then run changesink cdc setup to load them again. Nothing was written."},
		{change.ErrSlotAhead, "The changes between are gone from the slot (another consumer of it, or the sync ledger's rows " +
			"deleted): drop the slot (SELECT pg_drop_replication_slot('<slot>')), then run changesink cdc setup: it loads the " +
			"targets again from the new slot's snapshot and deletes the keys the snapshot lacks. Nothing was written."},
		{change.ErrSchemaChange, "Adapt the table's mapping entry to the change the message names (or drop schema_changes: refuse for it), then run cdc setup or sync once with CDC_RESYNC=<schema.table>: it loads the table again with its new columns and releases it. The other tables go on meanwhile."},
		{change.ErrHeld, "Fix what the message names (the mapping entry, the source's value, or the schema change under schema_changes: refuse), then run cdc setup or sync once with CDC_RESYNC=<schema.table>: it loads the table again from a new snapshot and releases it. Until then its changes are skipped; the other tables' are applied."},
		{change.ErrChangedDuringLoad, "Re-run cdc setup (a task retry in the flow does it): the load continues from a new snapshot and reads the table again, with its new columns. Nothing of the chunk was recorded."},
		{change.ErrKeyChange, "Set REPLICA IDENTITY FULL on the source table (a delete then says which row it removed), then " +
			"rebuild the target from a new snapshot. Nothing was written."},
		{change.ErrConflict, "The batch is inconsistent: inspect it; do not apply it. Nothing was written."},
		{change.ErrTargetConflict, "Find the other writer; delete the target rows of those keys and replay the batches that hold " +
			"them. Nothing was written."},
		{change.ErrVerify, "Re-run the batch (a retry converges: rows collapse under FINAL); if it persists, look for another writer."},
		{target.ErrClusterLocked, "Retry (a task retry in the flow does it). A run killed while holding the lock is broken by " +
			"the next run 30 s after its last heartbeat; the lock is a table of rows, never to be dropped by hand."},
		{target.ErrReplicaUnavailable, "Retry once every replica of the shard and ZooKeeper are up and replicating " +
			"(system.replicas: is_readonly, queue_size, absolute_delay): a re-run converges. Every write waits for every " +
			"replica, so one replica down stops the target's writes."},
		{target.ErrNoCluster, "Set target.cluster to a cluster the servers' remote_servers list (SELECT DISTINCT cluster FROM " +
			"system.clusters), or remove it for a target on one server."},
		{target.ErrClusterShards, "Name a cluster of one shard whose replicas hold the target (a cluster of several shards " +
			"needs a Distributed table, which changesink does not write)."},
		{target.ErrReplicaLacks, "Run changesink cdc setup: it creates the object ON CLUSTER again on the replica the message " +
			"names (a Replicated table fetches its rows from the other replicas), then re-run. Nothing was written."},
		// One replica's odd table before ErrNotReplicated, which setup also
		// wraps in it: the remedy is that replica's, not a rebuild.
		{target.ErrReplicasDisagree, "Make the replica the message names hold the same object as the others (drop the odd one " +
			"there and re-run changesink cdc setup, which creates it ON CLUSTER again; a Replicated table fetches its rows " +
			"from the other replicas), then re-run."},
		{target.ErrNotReplicated, "Rebuild the target as a Replicated table: drop it, its _ledger and its live view on every " +
			"replica, re-run changesink cdc setup (it creates them ON CLUSTER) and have the trigger take a new snapshot; or " +
			"remove target.cluster if the target is on one server."},
		{target.ErrClusterNotNamed, "Set target.cluster in the mapping to the cluster the table is replicated on " +
			"(system.clusters), then re-run changesink cdc setup."},
		{target.ErrNoZooKeeper, "Configure ZooKeeper (or ClickHouse Keeper) in the servers' configuration (<zookeeper>), or " +
			"remove target.cluster for a target on one server."},
		{change.ErrTargetLocked, "Retry (a task retry in the flow does it). A run killed while holding the lock is broken by the " +
			"next run 30 s after its last heartbeat; if no run is alive and it persists, DROP TABLE <db>.<table>_lock."},
		{change.ErrOrphanLedger, "Restore the table from a backup; or rebuild: drop the _ledger and the live view, re-run " +
			"changesink cdc setup, and have the trigger take a new snapshot. Nothing was created."},
		{change.ErrViewMismatch, "Drop the object the message names (DROP TABLE <db>.<view>), then re-run changesink cdc setup: " +
			"it makes the live view again over the mapped columns."},
		{change.ErrTargetRowUnreadable, "Another writer changed the target: find it, and repair the row the message names, or load " +
			"the table again (cdc sync: run it once with CDC_RESYNC=<schema.table>; the trigger flow: rebuild the target and take " +
			"a new snapshot). Nothing was written."},
		{change.ErrTargetMismatch, "The target was made for another mapping: fix the mapping to match it, or point it at a new " +
			"target.table and re-run changesink cdc setup; for cdc sync, run it once with CDC_RESYNC=<schema.table>: it builds the " +
			"target anew from the source."},
		{change.ErrNoDatabase, "Create the database, or set target.create_database: true in the mapping so that setup creates it."},
		{change.ErrUnsupportedServer, "Map the column to a type the server has (DateTime, or String with source_type: " +
			"timestamp; a Decimal of at most 38 digits, or String with source_type: numeric), or upgrade the server."},
		{mapping.ErrNoKey, "Add a primary key to the table, or give its mapping entry key: the NOT NULL columns that identify a row (REPLICA IDENTITY FULL alone gives the target no key); then re-run."},
		{mapping.ErrTargetsShareName, "Set defaults.target.table to a pattern that tells the tables apart, as \"{schema}_{table}\" (it renames every target the pattern names: give tables already loaded an entry with their current target.table first), or give one of them an entry with its own target.table."},
		{mapping.ErrMetaColumnName, "Give the target's own columns names the table does not use: target.version_column and " +
			"target.deleted_column in the table's entry, or under defaults: target: in a mapping set (a target already made keeps " +
			"its names: set them only for a new target)."},
		{mapping.ErrMapping, "Fix the mapping at the line and column the message names."},
		{target.ErrHTTPTooOld, "Use the server's native protocol: CLICKHOUSE_URL clickhouse://host:9000/database (secure=true and " +
			"the TLS port, 9440 by default, for TLS)."},
		{target.ErrBadURL, "Set CLICKHOUSE_URL to the native protocol: clickhouse://host:9000/database (secure=true and the " +
			"TLS port, 9440 by default, for TLS), or to the HTTP interface: http://host:8123/database, https://host:8443/database."},
		{target.ErrTLS, "With secure=true, CLICKHOUSE_URL must name the server's TLS port (9440 by default) and a host name " +
			"its certificate holds, signed by a CA in CLICKHOUSE_CA_FILE or the system trust store. A TLS port without it: " +
			"add secure=true to CLICKHOUSE_URL, or use the plaintext port (9000 by default)."},
		{target.ErrCredentials, "Check CLICKHOUSE_USERNAME and CLICKHOUSE_PASSWORD, or the user in CLICKHOUSE_URL."},
		{target.ErrNotAllowed, "cdc setup and apply need SELECT, INSERT, CREATE TABLE, DROP TABLE and RENAME TABLE in the " +
			"target's database and no readonly setting: check the grants and settings profile of the user (CLICKHOUSE_USERNAME), " +
			"and CLICKHOUSE_URL's query string."},
		{target.ErrUnknownSetting, "Fix the setting's name in CLICKHOUSE_URL's query string, or remove it."},
		{target.ErrNotSetUp, "Run changesink cdc setup first."},
		{target.ErrMemory, "Retry: a retry converges once the server has memory to spare. If every run fails so, raise the " +
			"limit the message names (for query: max_memory_usage; for user: max_memory_usage_for_user; total: " +
			"max_memory_usage_for_all_queries or the server's memory) where it is set: CLICKHOUSE_URL's query string, the " +
			"user's settings profile or the server's configuration."},
		{target.ErrLedgerSeq, "The target's rows are right (versions protect them); which batch is the last is not. Delete " +
			"the row of the holder whose lock was broken (the later applied_at): ALTER TABLE <db>.<table>_ledger DELETE " +
			"WHERE seq = <seq> AND holder = '<holder>', wait for the mutation (system.mutations), then re-run."},
		{target.ErrLedgerDropped, "Re-run the batch: the re-run makes the ledger again and records the batch (on a " +
			"cluster, run changesink cdc setup first: it makes the ledger again on every replica)."},
		{target.ErrTablesRace, "Retry: a re-run converges (ClickHouse 18.16 fails such reads while other tables of the database " +
			"are renamed or dropped)."},
		{errNotReleased, "Re-run the batch: a replay writes nothing twice and publishes the output files. The lock left is " +
			"broken by the next run 30 s after its last heartbeat."},
		{errNotPublished, "Re-run the batch: a replay writes nothing twice and writes expected.jsonl again, with an empty " +
			"pending.jsonl (this run applied those rows)."},
		{errOutputFiles, "Free space in WORKING_DIR and re-run the batch: none of it was written to ClickHouse."},
		// After the steps above: a lock not given back or output files not
		// published because the server went away say so first.
		{target.ErrUnreachable, "Retry: a retry of the run converges. Check that ClickHouse is up and that " +
			"CDC_CLICKHOUSE_TIMEOUT fits the batch."},
		{change.ErrConfig, "Fix the setting the message names (changesink help cdc lists every setting)."},
	}
}
