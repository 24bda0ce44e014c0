package slot

import (
	"errors"
	"fmt"
	"strings"

	"github.com/changesink/changesink/internal/outcome"
)

// Causes of the failures this package reports, each with a remedy (Hint).
// They arrive wrapped: in a *SlotError (the slot's facts), a *TableError
// (the table's), or with the facts in the message, and marked with their
// outcome class, named in each comment.
var (
	// ErrConfig: a Setup or StreamConfig field is missing or malformed
	// (outcome.Config).
	ErrConfig = errors.New("invalid slot configuration")
	// ErrWALLevel: the server's wal_level is not logical (outcome.Config).
	ErrWALLevel = errors.New("wal_level is not logical")
	// ErrNoReplication: the role may not open a replication connection:
	// it has neither REPLICATION nor SUPERUSER (outcome.Config).
	ErrNoReplication = errors.New("role lacks the REPLICATION attribute")
	// ErrNoSlotRoom: the slot is missing and every slot the server allows
	// (max_replication_slots) is taken (outcome.Config).
	ErrNoSlotRoom = errors.New("no free replication slot (max_replication_slots)")
	// ErrNoSenderRoom: every WAL sender the server allows (max_wal_senders)
	// is busy (outcome.Transient: one may free up).
	ErrNoSenderRoom = errors.New("no free WAL sender (max_wal_senders)")
	// ErrSlotMissing: the slot does not exist (outcome.Config: run setup).
	ErrSlotMissing = errors.New("replication slot does not exist")
	// ErrSlotPlugin: the slot is physical or decodes with another output
	// plugin than pgoutput (outcome.Refused).
	ErrSlotPlugin = errors.New("replication slot is not a pgoutput logical slot")
	// ErrSlotDatabase: the slot decodes another database (outcome.Refused).
	ErrSlotDatabase = errors.New("replication slot belongs to another database")
	// ErrSlotActive: another process streams from the slot (its pid is
	// named) (outcome.Transient: a consumer that just died lets go within
	// seconds; one that stays is a second consumer, which must be stopped).
	ErrSlotActive = errors.New("replication slot is in use by another process")
	// ErrSlotLost: the server removed WAL the slot still needed
	// (wal_status lost, max_slot_wal_keep_size): changes are gone
	// (outcome.Refused).
	ErrSlotLost = errors.New("replication slot lost WAL it needed (wal_status lost)")
	// ErrNoTable: a table named in Setup.Tables does not exist (outcome.Config).
	ErrNoTable = errors.New("table does not exist")
	// ErrNoSelect: the role may not read a table (SELECT), which the
	// initial load copies (outcome.Config).
	ErrNoSelect = errors.New("role may not read the table (SELECT)")
	// ErrNotOwner: a table the publication does not list yet is not the
	// role's: setup adds it to the publication, which PostgreSQL lets only
	// its owner do (outcome.Config).
	ErrNotOwner = errors.New("role does not own the table, which setup would add to the publication")
	// ErrPublicationNotOwned: the publication stands, lacks tables setup
	// would add, and is not the role's (ALTER PUBLICATION … ADD TABLE
	// needs its owner) (outcome.Config).
	ErrPublicationNotOwned = errors.New("role does not own the publication, to which setup would add tables")
	// ErrNoCreate: the publication is missing and the role may not create
	// it (CREATE on the database) (outcome.Config).
	ErrNoCreate = errors.New("role may not create the publication (CREATE on the database)")
	// ErrReplicaIdentity: a published table's replica identity does not
	// identify its rows: NOTHING, DEFAULT without a primary key, or an
	// index that no longer exists (outcome.Refused).
	ErrReplicaIdentity = errors.New("table has no usable replica identity")
	// ErrPublicationMissing: the publication does not exist
	// (outcome.Config: run setup).
	ErrPublicationMissing = errors.New("publication does not exist")
	// ErrSlotWithoutPublication: the slot exists but its publication does
	// not: one created now could not decode the changes committed before it
	// (the stream would fail with "publication does not exist")
	// (outcome.Refused).
	ErrSlotWithoutPublication = errors.New("slot exists but its publication does not")
	// ErrPublicationActions: the publication leaves out inserts, updates,
	// deletes or truncates (outcome.Refused).
	ErrPublicationActions = errors.New("publication does not publish every operation")
	// ErrPublicationTables: the publication is FOR ALL TABLES where a list
	// was asked, or the other way round (outcome.Refused). A table of the
	// list it lacks is added to it.
	ErrPublicationTables = errors.New("publication does not publish the tables asked for")
	// ErrPublicationViaRoot: the publication publishes partitioned
	// tables via their root (publish_via_partition_root): a TRUNCATE,
	// ATTACH or DETACH of one partition is then not published, and the
	// target would keep rows the source no longer has (outcome.Refused).
	ErrPublicationViaRoot = errors.New("publication publishes partitions via their root")
	// ErrPublicationFilter: the publication filters a table's rows (a
	// WHERE clause): filtered rows would be missing downstream, and an
	// UPDATE leaving the filter arrives as a DELETE (outcome.Refused).
	ErrPublicationFilter = errors.New("publication filters rows")
	// ErrConnLost: the replication connection was lost or closed by the
	// server (outcome.Transient): the open transaction is incomplete; a
	// new Stream resumes from the confirmed position.
	ErrConnLost = errors.New("replication connection lost")
	// ErrProtocol: the stream is not what pgoutput writes: a malformed
	// message, a change outside a transaction or of a relation never
	// described, commits out of order (outcome.Internal).
	ErrProtocol = errors.New("unexpected pgoutput stream")
	// ErrConfirmAhead: Confirm was asked for a position past what was
	// delivered and is safe to confirm (outcome.Internal: a caller's bug;
	// confirming it would skip transactions).
	ErrConfirmAhead = errors.New("confirm past what was delivered")
	// ErrSnapshotReleased: a reader asked for a snapshot that was already
	// released (outcome.Internal).
	ErrSnapshotReleased = errors.New("exported snapshot already released")
)

// SlotError is a refusal of the slot, with its facts.
type SlotError struct {
	Slot string
	// Plugin and Database are the slot's (ErrSlotPlugin, ErrSlotDatabase);
	// PID the process streaming from it (ErrSlotActive); WALStatus,
	// Restart and Confirmed its positions (ErrSlotLost).
	Plugin    string
	Database  string
	PID       int32
	WALStatus string
	Restart   LSN
	Confirmed LSN
	// Err is the cause, one of the sentinels.
	Err error
}

func (e *SlotError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "slot %s: %v", e.Slot, e.Err)
	switch {
	case errors.Is(e.Err, ErrSlotActive):
		fmt.Fprintf(&b, " (pid %d)", e.PID)
	case errors.Is(e.Err, ErrSlotPlugin):
		fmt.Fprintf(&b, " (plugin %q)", e.Plugin)
	case errors.Is(e.Err, ErrSlotDatabase):
		fmt.Fprintf(&b, " (database %q)", e.Database)
	case errors.Is(e.Err, ErrSlotLost):
		fmt.Fprintf(&b, " (restart_lsn %s, confirmed_flush_lsn %s)", e.Restart, e.Confirmed)
	}
	return b.String()
}

func (e *SlotError) Unwrap() error { return e.Err }

// TableError is a refusal of a table, with its facts.
type TableError struct {
	// Table is "schema.table"; Identity its replica identity (d, n, f, i);
	// Publication the publication concerned, when one is.
	Table       string
	Identity    byte
	Publication string
	// Detail says what is wrong in a few words ("no primary key").
	Detail string
	Err    error
}

func (e *TableError) Error() string {
	msg := fmt.Sprintf("table %s: %v", e.Table, e.Err)
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	if e.Publication != "" {
		msg += " in publication " + e.Publication
	}
	return msg
}

func (e *TableError) Unwrap() error { return e.Err }

func refused(err error) error   { return outcome.Refused.Mark(err) }
func configErr(err error) error { return outcome.Config.Mark(err) }
func transient(err error) error { return outcome.Transient.Mark(err) }
func internal(err error) error  { return outcome.Internal.Mark(err) }

// Hint returns what to do about err, a failure of this package: the remedy
// of the most specific cause it wraps, or "" when it has none. The task
// that wires the slot in folds this into its own hints table.
func Hint(err error) string {
	for _, h := range hints {
		if errors.Is(err, h.err) {
			return h.text
		}
	}
	return ""
}

var hints = []struct {
	err  error
	text string
}{
	{ErrConfig, "Fix the slot or publication setting named: slot and publication names are 1-63 lower-case letters, " +
		"digits and underscores; tables are schema.table."},
	{ErrWALLevel, "Set wal_level = logical on the source (ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL; " +
		"on a managed service, enable logical replication in its settings."},
	{ErrNoReplication, "Grant the role replication (ALTER ROLE … REPLICATION), or use a role that has it."},
	{ErrNoSlotRoom, "Raise max_replication_slots on the source (a restart), or drop a slot nobody reads " +
		"(SELECT * FROM pg_replication_slots WHERE NOT active): an unread slot also retains WAL."},
	{ErrNoSenderRoom, "Retry; if it persists, raise max_wal_senders on the source (a restart) or stop a consumer " +
		"(pg_stat_replication lists them)."},
	{ErrSlotMissing, "Run the setup (it creates the slot and exports a snapshot for the initial load); " +
		"a slot dropped by hand lost its position: rebuild the targets from a new snapshot."},
	{ErrSlotPlugin, "Choose another slot name: this one is used by another tool (changesink never drops a slot)."},
	{ErrSlotDatabase, "Choose another slot name, or connect to the slot's database: a slot decodes one database."},
	{ErrSlotActive, "Retry in a minute: a consumer that died lets go when the server notices. If it persists, find the " +
		"process (SELECT * FROM pg_stat_activity WHERE pid = <pid>): two consumers of one slot lose changes; stop the other."},
	{ErrSlotLost, "The slot's changes are gone. Drop the slot (SELECT pg_drop_replication_slot('<slot>')), run the setup " +
		"again and reload the targets from its snapshot; raise max_slot_wal_keep_size or run sync more often."},
	{ErrNoTable, "Create the table, or fix its name (schema.table) in the table list."},
	{ErrNoSelect, "GRANT SELECT ON <schema.table> TO <role> (the initial load reads it), or use a role that may read it."},
	{ErrNotOwner, "Have the table's owner add it (ALTER PUBLICATION <publication> ADD TABLE <schema.table>) before setup, " +
		"or make the role its owner (ALTER TABLE … OWNER TO <role>), or a member of the owner's role."},
	{ErrPublicationNotOwned, "Have the publication's owner add the tables (ALTER PUBLICATION <publication> ADD TABLE …) " +
		"before setup, or make the role its owner (ALTER PUBLICATION <publication> OWNER TO <role>)."},
	{ErrNoCreate, "GRANT CREATE ON DATABASE <database> TO <role>, or have a role that may create it make the publication " +
		"(CREATE PUBLICATION <publication> FOR TABLE …) before setup."},
	{ErrReplicaIdentity, "Give the table a primary key (its target's key). Without one: ALTER TABLE … REPLICA IDENTITY " +
		"USING INDEX of a unique, non-partial index on NOT NULL columns (the index's columns are the key), or ALTER TABLE … " +
		"REPLICA IDENTITY FULL and give the table's mapping entry key: (NOT NULL columns that identify a row); then run again."},
	{ErrPublicationMissing, "Run the setup: it creates the publication. If the publication exists, it was created (or " +
		"dropped and created again) after the slot, which cannot decode the changes before it: drop the slot " +
		"(SELECT pg_drop_replication_slot('<slot>')), run the setup again and reload the targets from its snapshot."},
	{ErrSlotWithoutPublication, "Drop the slot (SELECT pg_drop_replication_slot('<slot>')), run the setup again (the " +
		"publication first, then a new slot) and reload the targets from its snapshot."},
	{ErrPublicationActions, "ALTER PUBLICATION … SET (publish = 'insert, update, delete, truncate'), or use another " +
		"publication name."},
	{ErrPublicationTables, "Use another publication name, or make the setting match the publication: a table list " +
		"(CDC_TABLES or the mapping file) for a FOR TABLE publication, all tables for FOR ALL TABLES."},
	{ErrPublicationViaRoot, "ALTER PUBLICATION … SET (publish_via_partition_root = false), or use another publication " +
		"name: each partition is then a table of its own, with its own target, and its TRUNCATE is published."},
	{ErrPublicationFilter, "Remove the row filter (ALTER PUBLICATION … SET TABLE … without WHERE), or use another " +
		"publication name."},
	{ErrConnLost, "Retry: a new run resumes from the slot's confirmed position."},
	{ErrProtocol, "Report it with the message: the server sent what changesink does not expect; nothing past the " +
		"last confirmed transaction was confirmed."},
	{ErrConfirmAhead, "Report it: a caller asked to confirm past what it was given; nothing was confirmed."},
	{ErrSnapshotReleased, "Report it: the initial load asked for a snapshot after releasing it."},
}
