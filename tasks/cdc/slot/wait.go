package slot

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultWaitReport is how often Ensure says what the creation of a slot
// waits for (Setup.WaitReport).
const DefaultWaitReport = 5 * time.Second

// waitsShown bounds the transactions a report names, oldest first.
const waitsShown = 5

// A new slot is consistent only once the transactions that were running
// when its creation began (and those running when the first of them ended)
// have ended: CREATE_REPLICATION_SLOT waits for them, silently, as long as
// they last. A transaction blocks it only once it has a transaction ID
// (it wrote something); a prepared transaction (PREPARE TRANSACTION) holds
// its ID until COMMIT PREPARED or ROLLBACK PREPARED, whoever ends it.

// waitsSQL lists the transactions that hold a transaction ID, the
// running ones (pg_stat_activity; another role's are hidden from a role
// without pg_read_all_stats) and the prepared ones, oldest first, and
// whether this role sees every session.
const waitsSQL = `SELECT w.kind, w.who, w.state, w.age::text, w.db,
       (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user)
         OR pg_catalog.pg_has_role('pg_read_all_stats', 'MEMBER')
  FROM (SELECT 'running' AS kind, a.pid::text AS who, COALESCE(a.state, '') AS state,
               COALESCE(floor(extract(epoch FROM now() - a.xact_start)), 0)::int8 AS age, COALESCE(a.datname::text, '') AS db
          FROM pg_catalog.pg_stat_activity a WHERE a.backend_xid IS NOT NULL AND a.pid <> pg_catalog.pg_backend_pid()
        UNION ALL
        SELECT 'prepared', p.gid, '', floor(extract(epoch FROM now() - p.prepared))::int8, p.database::text
          FROM pg_catalog.pg_prepared_xacts p) w
 ORDER BY w.age DESC, w.who`

// waiting is a transaction a slot's creation may wait for.
type waiting struct {
	prepared bool
	who      string // the pid, or a prepared transaction's gid
	state    string // pg_stat_activity.state ("" for a prepared one)
	age      time.Duration
	db       string
}

// readWaits returns the transactions that hold a transaction ID, oldest
// first, and whether the role sees every session's.
func readWaits(ctx context.Context, conn *pgconn.PgConn) ([]waiting, bool, error) {
	rows, err := simpleQuery(ctx, conn, waitsSQL)
	if err != nil {
		return nil, false, fmt.Errorf("read the running and prepared transactions: %w", err)
	}
	seesAll := true
	var out []waiting
	for _, r := range rows {
		secs, err := strconv.ParseInt(string(r[3]), 10, 64)
		if err != nil {
			return nil, false, fmt.Errorf("read the running and prepared transactions: age %q: %w", r[3], err)
		}
		out = append(out, waiting{prepared: string(r[0]) == "prepared", who: string(r[1]), state: string(r[2]),
			age: time.Duration(secs) * time.Second, db: string(r[4])})
		seesAll = string(r[5]) == "t"
	}
	if len(rows) == 0 {
		// No row says whether the role sees them all: ask alone.
		rows, err := simpleQuery(ctx, conn, `SELECT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user)
			OR pg_catalog.pg_has_role('pg_read_all_stats', 'MEMBER')`)
		if err != nil {
			return nil, false, fmt.Errorf("read the running and prepared transactions: %w", err)
		}
		seesAll = len(rows) == 1 && string(rows[0][0]) == "t"
	}
	return out, seesAll, nil
}

// describeWaits is the line Ensure logs while creating slot has taken
// waited: the transactions it may wait for, oldest first.
func describeWaits(slot string, waited time.Duration, ws []waiting, seesAll bool, user string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cdc: slot %s: creating it has waited %s for transactions to end (PostgreSQL makes a slot once the transactions "+
		"running when it began have ended)", slot, waited.Round(time.Second))
	var named []string
	for i, w := range ws {
		if i == waitsShown {
			named = append(named, fmt.Sprintf("%d more", len(ws)-waitsShown))
			break
		}
		if w.prepared {
			named = append(named, fmt.Sprintf("prepared transaction %q (%s, database %s: COMMIT PREPARED or ROLLBACK PREPARED ends it)", w.who, w.age, w.db))
			continue
		}
		named = append(named, fmt.Sprintf("pid %s (%s, %s, database %s)", w.who, orUnknown(w.state), w.age, w.db))
	}
	switch {
	case len(named) > 0:
		b.WriteString(": " + strings.Join(named, ", "))
	default:
		b.WriteString(": none holds a transaction ID now")
	}
	if !seesAll {
		fmt.Fprintf(&b, "; other roles' sessions are hidden from role %s (pg_read_all_stats shows them)", user)
	}
	return b.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "state unknown"
	}
	return s
}

// waitReport says what a slot's creation waits for, to log, while it
// lasts (Setup.Log).
type waitReport struct {
	log   *slog.Logger // nil: no report
	every time.Duration
	slot  string
	user  string         // the role, for a report that cannot see every session
	pg    *pgconn.Config // where to open conn when it is nil
	conn  *pgconn.PgConn // a connection idle while the slot is created; nil: one of its own
}

// create runs mk, which creates the slot, and, with r.log set, logs
// every r.every what the creation waits for (readWaits) until it ends,
// and once more when the slot is made after such a wait.
func (r waitReport) create(ctx context.Context, mk func() (*Snapshot, error)) (*Snapshot, error) {
	if r.log == nil {
		return mk()
	}
	type created struct {
		snap *Snapshot
		err  error
	}
	done := make(chan created, 1)
	go func() {
		snap, err := mk()
		done <- created{snap, err}
	}()
	every := r.every
	if every <= 0 {
		every = DefaultWaitReport
	}
	start := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	own := r.conn == nil
	defer func() {
		if own && r.conn != nil {
			closeConn(r.conn)
		}
	}()
	reported, failed := false, false
	for {
		select {
		case c := <-done:
			if reported && c.err == nil {
				r.log.Info(fmt.Sprintf("cdc: slot %s: created after waiting %s for transactions to end", r.slot, time.Since(start).Round(time.Second)))
			}
			return c.snap, c.err
		case <-tick.C:
			var ws []waiting
			var seesAll bool
			var err error
			if r.conn == nil {
				r.conn, err = connect(ctx, r.pg, false)
			}
			if err == nil {
				ws, seesAll, err = readWaits(ctx, r.conn)
			}
			switch {
			case err != nil && !failed:
				failed = true
				r.log.Warn(fmt.Sprintf("cdc: slot %s: creating it has waited %s; cannot say for what: %v", r.slot, time.Since(start).Round(time.Second), err))
			case err == nil:
				reported = true
				r.log.Info(describeWaits(r.slot, time.Since(start), ws, seesAll, r.user))
			}
		}
	}
}
