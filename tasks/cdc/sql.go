package cdc

import (
	"regexp"
	"strconv"
	"strings"
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

func keysColumn(n int) string { return "k" + strconv.Itoa(n) }

var bareIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedWords are keywords that must not appear bare where changesink
// puts identifiers (column lists, FROM, ORDER BY, WHERE).
var reservedWords = func() map[string]bool {
	words := map[string]bool{}
	for _, w := range strings.Fields(`ALIAS ALL AND ANTI ANY ARRAY AS ASC ASOF ATTACH BETWEEN BOTH BY CASE CAST CODEC COLLATE
		COMMENT CREATE CROSS DATABASE DEFAULT DELETE DESC DETACH DISTINCT DROP ELSE END EPHEMERAL EXCEPT EXISTS EXTRACT
		FALSE FETCH FINAL FIRST FOR FORMAT FROM FULL GLOBAL GROUP HAVING IF ILIKE IN INF INNER INSERT INTERSECT INTERVAL
		INTO IS JOIN KEY LEADING LEFT LIKE LIMIT LOCAL MATERIALIZED NAN NOT NULL NULLS OFFSET ON OR ORDER OUTER OVER
		PARTITION PASTE PREWHERE PRIMARY QUALIFY REPLACE RIGHT SAMPLE SELECT SEMI SETTINGS TABLE TEMPORARY THEN TIES TO
		TOP TOTALS TRAILING TRUE TTL UNION USING VALUES VIEW WHEN WHERE WINDOW WITH`) {
		words[w] = true
	}
	return words
}()

// quoteIdent returns a ClickHouse identifier: bare when it is a plain word
// that is not a keyword (so the orders DDL reads exactly like the seed's),
// else in backquotes with \ and ` escaped.
func quoteIdent(s string) string {
	if bareIdent.MatchString(s) && !reservedWords[strings.ToUpper(s)] {
		return s
	}
	return "`" + strings.NewReplacer(`\`, `\\`, "`", "\\`").Replace(s) + "`"
}

// qualified renders db.name. The database "default" stays bare, as the
// seed writes it: a keyword is harmless before the dot.
func qualified(db, name string) string {
	q := quoteIdent(db)
	if db == "default" {
		q = db
	}
	return q + "." + quoteIdent(name)
}

// columnList renders the mapped columns, then the version and deleted
// columns when withMeta.
func columnList(m *Mapping, withMeta bool) string {
	names := make([]string, 0, len(m.cols)+2)
	for i := range m.cols {
		names = append(names, quoteIdent(m.cols[i].name))
	}
	if withMeta {
		names = append(names, quoteIdent(m.Target.VersionColumn), quoteIdent(m.Target.DeletedColumn))
	}
	return strings.Join(names, ", ")
}

func keyList(m *Mapping) string {
	names := make([]string, len(m.keyIdx))
	for n, i := range m.keyIdx {
		names[n] = quoteIdent(m.cols[i].name)
	}
	return strings.Join(names, ", ")
}

// createDatabaseSQL is run by setup only when target.create_database is true.
func createDatabaseSQL(m *Mapping) string {
	db := quoteIdent(m.Target.Database)
	if m.Target.Database == "default" {
		db = "default"
	}
	return "CREATE DATABASE IF NOT EXISTS " + db
}

// createTableSQL is the target table: the mapped columns, the UInt64
// version (the source LSN) and the UInt8 delete marker, a ReplacingMergeTree
// on the version, ordered by the key (seed task create_target).
func createTableSQL(m *Mapping, caps serverCaps) string {
	var b strings.Builder
	b.WriteString("CREATE TABLE IF NOT EXISTS " + qualified(m.Target.Database, m.Target.Table) + " (\n")
	for i := range m.cols {
		b.WriteString("  " + quoteIdent(m.cols[i].name) + " " + m.cols[i].typ.ddl(caps) + ",\n")
	}
	b.WriteString("  " + quoteIdent(m.Target.VersionColumn) + " UInt64,\n")
	b.WriteString("  " + quoteIdent(m.Target.DeletedColumn) + " UInt8\n")
	b.WriteString(") ENGINE = ReplacingMergeTree(" + quoteIdent(m.Target.VersionColumn) + ")\n")
	if len(m.keyIdx) == 1 {
		b.WriteString("ORDER BY " + keyList(m))
	} else {
		b.WriteString("ORDER BY (" + keyList(m) + ")")
	}
	return b.String()
}

// createViewSQL is the live view: current rows, delete markers hidden.
func createViewSQL(m *Mapping) string {
	return "CREATE VIEW IF NOT EXISTS " + qualified(m.Target.Database, m.Target.LiveView) + " AS\n" +
		"SELECT " + columnList(m, false) + "\n" +
		"FROM " + qualified(m.Target.Database, m.Target.Table) + " FINAL\n" +
		"WHERE " + quoteIdent(m.Target.DeletedColumn) + " = 0"
}

// keysIn is the condition that picks the batch's keys, which arrive in the
// external table _cdc_keys.
func keysIn(m *Mapping) string {
	ext := make([]string, len(m.keyIdx))
	for n := range m.keyIdx {
		ext[n] = keysColumn(n)
	}
	if len(m.keyIdx) == 1 {
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
func readSQL(m *Mapping) string {
	return "SELECT " + columnList(m, true) + "\n" +
		"FROM " + qualified(m.Target.Database, m.Target.Table) + " FINAL\n" +
		"PREWHERE " + keysIn(m)
}

// versionsSQL reads only the key and the winning version of the batch's
// keys: deciding what is pending needs the payload only where the target
// holds the batch's own version (a replay, or a conflict), and two columns
// read in half the time of all (50M rows: 0.6 s).
func versionsSQL(m *Mapping) string {
	return "SELECT " + keyList(m) + ", " + quoteIdent(m.Target.VersionColumn) + ", " + quoteIdent(m.Target.DeletedColumn) + "\n" +
		"FROM " + qualified(m.Target.Database, m.Target.Table) + " FINAL\n" +
		"PREWHERE " + keysIn(m)
}

// insertSQL names every column: ClickHouse 18.16 answers an INSERT without
// a column list with an empty header, and clickhouse-go then refuses every
// row (seen on 18.16, the Debian package).
func insertSQL(m *Mapping) string {
	return "INSERT INTO " + qualified(m.Target.Database, m.Target.Table) + " (" + columnList(m, true) + ")"
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

func renameSQL(from, to string) string { return "RENAME TABLE " + from + " TO " + to }

// truncatedSQL reads the keys the target holds live below a TRUNCATE's
// version (bound: that version).
func truncatedSQL(m *Mapping) string {
	return "SELECT " + keyList(m) + " FROM " + qualified(m.Target.Database, m.Target.Table) + " FINAL WHERE " +
		quoteIdent(m.Target.DeletedColumn) + " = 0 AND " + quoteIdent(m.Target.VersionColumn) + " < ?"
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
