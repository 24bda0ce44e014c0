package target

import (
	"strconv"
	"strings"

	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// The SQL changesink sends to ClickHouse, built by pure functions from the
// mapping; every identifier goes through quoteIdent and no value is ever
// pasted into a statement (keys travel in an external table, the rows in a
// native INSERT block). Golden files in testdata/ hold the output for the
// shipped orders mapping and the all-types mapping, on 18.16 and current
// servers; with the orders mapping the DDL is the seed's text exactly.

// keysTable is the name of the external table that carries the batch's
// keys; its columns are k0, k1, ... in key order (plain names, whatever the
// key columns are called, since an external table's structure is not quoted).
const keysTable = "_cdc_keys"

// keysColumn is the name of the n-th key column of keysTable.
func keysColumn(n int) string { return "k" + strconv.Itoa(n) }

// columnList renders the mapped columns, then the version and deleted
// columns when withMeta.
func columnList(m *mapping.Mapping, withMeta bool) string {
	names := make([]string, 0, len(m.Cols)+2)
	for i := range m.Cols {
		names = append(names, mapping.QuoteIdent(m.Cols[i].Name))
	}
	if withMeta {
		names = append(names, mapping.QuoteIdent(m.Target.VersionColumn), mapping.QuoteIdent(m.Target.DeletedColumn))
	}
	return strings.Join(names, ", ")
}

// keyList renders the key columns, in key order.
func keyList(m *mapping.Mapping) string {
	names := make([]string, len(m.KeyIdx))
	for n, i := range m.KeyIdx {
		names[n] = mapping.QuoteIdent(m.Cols[i].Name)
	}
	return strings.Join(names, ", ")
}

// createDatabaseSQL is run by setup only when target.create_database is true.
func createDatabaseSQL(m *mapping.Mapping) string {
	db := mapping.QuoteIdent(m.Target.Database)
	if m.Target.Database == "default" {
		db = "default"
	}
	return "CREATE DATABASE IF NOT EXISTS " + db
}

// createTableSQL is the target table: the mapped columns, the UInt64
// version (the source LSN) and the UInt8 delete marker, a ReplacingMergeTree
// on the version, ordered by the key (seed task create_target); on a server
// that has it (caps.IsDeleted) the delete marker is the engine's is_deleted
// column too (deleted.go).
func createTableSQL(m *mapping.Mapping, caps mapping.ServerCaps) string {
	var b strings.Builder
	b.WriteString("CREATE TABLE IF NOT EXISTS " + mapping.Qualified(m.Target.Database, m.Target.Table) + " (\n")
	for i := range m.Cols {
		b.WriteString("  " + mapping.QuoteIdent(m.Cols[i].Name) + " " + m.Cols[i].Type.DDL(caps) + ",\n")
	}
	b.WriteString("  " + mapping.QuoteIdent(m.Target.VersionColumn) + " UInt64,\n")
	b.WriteString("  " + mapping.QuoteIdent(m.Target.DeletedColumn) + " UInt8\n")
	engineArgs := mapping.QuoteIdent(m.Target.VersionColumn)
	if caps.IsDeleted {
		engineArgs += ", " + mapping.QuoteIdent(m.Target.DeletedColumn)
	}
	b.WriteString(") ENGINE = ReplacingMergeTree(" + engineArgs + ")\n")
	if len(m.KeyIdx) == 1 {
		b.WriteString("ORDER BY " + keyList(m))
	} else {
		b.WriteString("ORDER BY (" + keyList(m) + ")")
	}
	return b.String()
}

// createViewSQL is the live view: current rows, delete markers hidden.
func createViewSQL(m *mapping.Mapping) string {
	return "CREATE VIEW IF NOT EXISTS " + mapping.Qualified(m.Target.Database, m.Target.LiveView) + " AS\n" +
		"SELECT " + columnList(m, false) + "\n" +
		"FROM " + mapping.Qualified(m.Target.Database, m.Target.Table) + " FINAL\n" +
		"WHERE " + mapping.QuoteIdent(m.Target.DeletedColumn) + " = 0"
}

// keysIn is the condition that picks the batch's keys, which arrive in the
// external table _cdc_keys.
func keysIn(m *mapping.Mapping) string {
	ext := make([]string, len(m.KeyIdx))
	for n := range m.KeyIdx {
		ext[n] = keysColumn(n)
	}
	if len(m.KeyIdx) == 1 {
		return keyList(m) + " IN (SELECT " + ext[0] + " FROM " + keysTable + ")"
	}
	return "(" + keyList(m) + ") IN (SELECT " + strings.Join(ext, ", ") + " FROM " + keysTable + ")"
}

// readSQL reads the winning version of the batch's keys (seed tasks
// read_current and read_back). The keys are a PREWHERE: they are the
// sorting key, so every version of a key passes or none does, and FINAL
// then merges only the batch's rows. With a WHERE, ClickHouse 18.16 reads
// every column of every granule and merges the whole table under FINAL
// before it filters (50M rows: 3.1 s for 50,000 random keys, 1.2 s with the
// PREWHERE).
func readSQL(m *mapping.Mapping) string {
	return "SELECT " + columnList(m, true) + "\n" +
		"FROM " + mapping.Qualified(m.Target.Database, m.Target.Table) + " FINAL\n" +
		"PREWHERE " + keysIn(m)
}

// versionsSQL reads only the key and the winning version of the batch's
// keys: deciding what is pending needs the payload only where the target
// holds the batch's own version (a replay, or a conflict), and two columns
// read in half the time of all (50M rows: 0.6 s).
func versionsSQL(m *mapping.Mapping) string {
	return "SELECT " + keyList(m) + ", " + mapping.QuoteIdent(m.Target.VersionColumn) + ", " + mapping.QuoteIdent(m.Target.DeletedColumn) + "\n" +
		"FROM " + mapping.Qualified(m.Target.Database, m.Target.Table) + " FINAL\n" +
		"PREWHERE " + keysIn(m)
}

// insertSQL names every column: ClickHouse 18.16 answers an INSERT without
// a column list with an empty header, and clickhouse-go then refuses every
// row (seen on 18.16, the Debian package).
func insertSQL(m *mapping.Mapping) string {
	return "INSERT INTO " + mapping.Qualified(m.Target.Database, m.Target.Table) + " (" + columnList(m, true) + ")"
}

// columnsSQL and tableSQL read the target's shape for the schema check;
// the database and table names are bound, not pasted.
const (
	columnsSQL = "SELECT name, type FROM system.columns WHERE database = ? AND table = ?"
	tableSQL   = "SELECT engine, engine_full, sorting_key FROM system.tables WHERE database = ? AND name = ?"
)

// The lock's statements (lock.go); name is the qualified lock table.

// lockCreateSQL takes the lock: it creates the lock table with its holder
// row in one statement (holder String, host String, pid UInt32, beat
// DateTime), so a run cut while taking it leaves no empty lock.
func lockCreateSQL(name, id, host string, pid int) string {
	return "CREATE TABLE " + name + " ENGINE = Memory AS SELECT " + quoteString(id) + " AS holder, " + quoteString(host) + " AS host, toUInt32(" + strconv.Itoa(pid) + ") AS pid, now() AS beat"
}

// lockBeatSQL inserts a heartbeat row stamped by the server's clock, into
// the lock only when it holds a row of holder id; id and host are quoted
// literals (quoteString), pid a number.
func lockBeatSQL(name, id, host string, pid int) string {
	return "INSERT INTO " + name + " (holder, host, pid, beat) SELECT " + quoteString(id) + ", " + quoteString(host) + ", " +
		strconv.Itoa(pid) + ", now() FROM " + name + " WHERE holder = " + quoteString(id) + " LIMIT 1"
}

// lockHolderSQL reads the newest heartbeat's holder and its age, in the
// server's clock (one row, also for an empty table).
func lockHolderSQL(name string) string {
	return "SELECT argMax(holder, beat), argMax(host, beat), argMax(pid, beat), max(beat), now(), count() FROM " + name
}

// lockMineSQL counts the rows of one holder (bound: the holder id).
func lockMineSQL(name string) string { return "SELECT count() FROM " + name + " WHERE holder = ?" }

// lockMadeSQL reads a lock table's creation time (bound: database, name).
const lockMadeSQL = "SELECT metadata_modification_time, now() FROM system.tables WHERE database = ? AND name = ?"

// lockAsidesSQL lists the tables of a database whose names begin with a
// prefix (bound: database, the prefix's length in bytes, the prefix).
const lockAsidesSQL = "SELECT name FROM system.tables WHERE database = ? AND substring(name, 1, ?) = ?"

// renameSQL renames the table from (qualified) to to.
func renameSQL(from, to string) string { return "RENAME TABLE " + from + " TO " + to }

// truncatedSQL reads the keys the target holds live below a TRUNCATE's
// version (bound: that version).
func truncatedSQL(m *mapping.Mapping) string {
	return "SELECT " + keyList(m) + " FROM " + mapping.Qualified(m.Target.Database, m.Target.Table) + " FINAL WHERE " +
		mapping.QuoteIdent(m.Target.DeletedColumn) + " = 0 AND " + mapping.QuoteIdent(m.Target.VersionColumn) + " < ?"
}

// quoteString renders s as a ClickHouse string literal.
func quoteString(s string) string {
	b := []byte{'\''}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'', '\\':
			b = append(b, '\\', c)
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '\''))
}
