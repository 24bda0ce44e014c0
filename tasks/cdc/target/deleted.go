package target

import (
	"context"
	"strings"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// A target on a server that has it (ClickHouse 23.2 and newer, ServerCaps.
// IsDeleted) is a ReplacingMergeTree(version, deleted): the delete marker
// is the engine's is_deleted column, so a user's SELECT ... FINAL leaves
// deleted keys out by itself, as the live view's WHERE does. An older
// target, ReplacingMergeTree(version) (18.16, the seed flow's, an earlier
// changesink's), is kept and works as before.
//
// changesink's own reads (the versions that decide what is pending, the
// read-back that verifies) need each key's winning row also when it is a
// delete marker: its version places the batch's changes before or after
// the delete. FINAL on such a table returns no row for those keys, and no
// setting changes that, so the keys FINAL did not return are read again
// without FINAL, delete markers only (deletedSQL): when FINAL returns no
// row for a key, its winning row (highest version, the last inserted among
// equals) is a delete marker, so the highest version among its delete
// markers is the winner's. Of two delete markers at that version with
// different payloads (a key deleted twice at one version, in two batches
// of one transaction) the one read first is taken, which may be the one
// FINAL would not: the read-back then refuses a payload it did not write,
// never accepts a wrong one. Without CLEANUP, merges keep a key's last
// row even when it is a delete marker (OPTIMIZE FINAL too); a CLEANUP
// merge (OPTIMIZE ... FINAL CLEANUP, allow_experimental_replacing_merge_
// with_cleanup) removes them, and a key whose marker is gone reads as
// never written (docs/clickhouse.md).

// query reads rows' keys (scan), and on a ReplacingMergeTree(version,
// deleted) the delete markers of the keys FINAL did not return.
func (t *Table) query(ctx context.Context, rows []*change.Row, sql string, keysOnly bool) (map[string]*change.Row, error) {
	out, err := t.scan(ctx, rows, sql, keysOnly)
	if err != nil || !t.isDeleted {
		return out, err
	}
	var missing []*change.Row
	seen := make(map[string]bool, len(rows))
	for _, r := range rows {
		if out[r.Key] == nil && !seen[r.Key] {
			seen[r.Key] = true
			missing = append(missing, r)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	deleted, err := t.scan(ctx, missing, deletedSQL(t.M, keysOnly), keysOnly)
	if err != nil {
		return nil, err
	}
	for k, r := range deleted {
		out[k] = r
	}
	return out, nil
}

// deletedSQL reads the delete markers of the batch's keys without FINAL:
// every mapped column, or (keysOnly) the key columns, then the version and
// the delete marker.
func deletedSQL(m *mapping.Mapping, keysOnly bool) string {
	cols := columnList(m, true)
	if keysOnly {
		cols = keyList(m) + ", " + mapping.QuoteIdent(m.Target.VersionColumn) + ", " + mapping.QuoteIdent(m.Target.DeletedColumn)
	}
	return "SELECT " + cols + "\n" +
		"FROM " + mapping.Qualified(m.Target.Database, m.Target.Table) + "\n" +
		"PREWHERE " + keysIn(m) + "\n" +
		"WHERE " + mapping.QuoteIdent(m.Target.DeletedColumn) + " = 1"
}

// replacingArgs returns the version and delete-marker columns of a
// ReplacingMergeTree as system.tables' engine_full shows it, unquoted:
// "ReplacingMergeTree(_cdc_lsn) ORDER BY id" → _cdc_lsn, "";
// "ReplacingMergeTree(_cdc_lsn, _cdc_deleted) ..." → _cdc_lsn, _cdc_deleted.
// A Replicated engine's leading quoted arguments (its ZooKeeper path and
// replica name) are skipped.
func replacingArgs(full string) (version, deleted string) {
	args := engineArgs(full)
	for len(args) > 0 && strings.HasPrefix(args[0], "'") {
		args = args[1:]
	}
	unquote := func(s string) string { return strings.Trim(s, "`\"") }
	switch len(args) {
	case 1:
		return unquote(args[0]), ""
	case 2:
		return unquote(args[0]), unquote(args[1])
	}
	return "", ""
}

// engineVersion returns the version column of a ReplacingMergeTree's
// engine_full (replacingArgs).
func engineVersion(full string) string {
	v, _ := replacingArgs(full)
	return v
}

// engineArgs splits the engine's argument list (the first parenthesis of
// engine_full), each argument trimmed; none when there is no list.
func engineArgs(full string) []string {
	open := strings.IndexByte(full, '(')
	if open < 0 {
		return nil
	}
	var args []string
	depth, start := 0, open+1
	quoted := false
	for i := open; i < len(full); i++ {
		switch c := full[i]; {
		case c == '\'' && (i == 0 || full[i-1] != '\\'):
			quoted = !quoted
		case quoted:
		case c == '(':
			depth++
		case c == ',' && depth == 1:
			args = append(args, strings.TrimSpace(full[start:i]))
			start = i + 1
		case c == ')':
			depth--
			if depth == 0 {
				if a := strings.TrimSpace(full[start:i]); a != "" || len(args) > 0 {
					args = append(args, a)
				}
				return args
			}
		}
	}
	return nil
}
