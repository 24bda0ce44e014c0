package slot

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// logLines is a slog.Handler that keeps each record's level and message.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }

func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, r.Level.String()+" "+r.Message)
	return nil
}

func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }

// find returns the first line holding every one of says, or "".
func (l *logLines) find(says ...string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		found := true
		for _, s := range says {
			found = found && strings.Contains(line, s)
		}
		if found {
			return line
		}
	}
	return ""
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// TestDescribeWaits: the line that says what a slot's creation waits for
// names the oldest transactions, running (pid, state, age, database) and
// prepared (gid, age, database, what ends it), at most five, and says
// when the role cannot see other roles' sessions.
func TestDescribeWaits(t *testing.T) {
	running := func(pid string, age time.Duration) waiting {
		return waiting{who: pid, state: "idle in transaction", age: age, db: "shop"}
	}
	const head = "cdc: slot s: creating it has waited 12s for transactions to end (PostgreSQL makes a slot once the transactions running when it began have ended)"
	for _, tt := range []struct {
		name    string
		ws      []waiting
		seesAll bool
		want    string
	}{
		{"none", nil, true, head + ": none holds a transaction ID now"},
		{"none visible", nil, false, head + ": none holds a transaction ID now; other roles' sessions are hidden from role cdc (pg_read_all_stats shows them)"},
		{"running and prepared", []waiting{{prepared: true, who: "tx-1", age: 3 * time.Minute, db: "shop"}, running("4242", 65*time.Second),
			{who: "4243", age: time.Second, db: "other"}}, true,
			head + `: prepared transaction "tx-1" (3m0s, database shop: COMMIT PREPARED or ROLLBACK PREPARED ends it), ` +
				"pid 4242 (idle in transaction, 1m5s, database shop), pid 4243 (state unknown, 1s, database other)"},
		{"more than five", []waiting{running("1", 7*time.Second), running("2", 6*time.Second), running("3", 5*time.Second), running("4", 4*time.Second),
			running("5", 3*time.Second), running("6", 2*time.Second), running("7", time.Second)}, true,
			head + ": pid 1 (idle in transaction, 7s, database shop), pid 2 (idle in transaction, 6s, database shop), " +
				"pid 3 (idle in transaction, 5s, database shop), pid 4 (idle in transaction, 4s, database shop), " +
				"pid 5 (idle in transaction, 3s, database shop), 2 more"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := describeWaits("s", 12300*time.Millisecond, tt.ws, tt.seesAll, "cdc"); got != tt.want {
				t.Errorf("\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestEnsureSaysWhatTheSlotWaitsFor: CREATE_REPLICATION_SLOT waits for
// the transactions running when it began to end. While it waits, Ensure
// logs every WaitReport what it waits for: a long open transaction by its
// pid, state and database, a prepared one by its gid (where the server
// allows prepared transactions: max_prepared_transactions); once that
// transaction ends, the slot is made and a last line says how long it
// waited. ExportTemporaryLogged (a joining table's snapshot) does the same.
func TestEnsureSaysWhatTheSlotWaitsFor(t *testing.T) {
	src := newSource(t)
	src.exec("CREATE TABLE w (id int PRIMARY KEY)")
	db := src.query("SELECT current_database()")
	prepares := src.query("SELECT current_setting('max_prepared_transactions')") != "0"
	for i, tt := range []struct {
		name                string
		prepared, temporary bool
	}{{"a long transaction", false, false}, {"a prepared transaction", true, false}, {"a temporary slot's", false, true}} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.prepared && !prepares {
				t.Skip("max_prepared_transactions is 0 on this server: no prepared transaction can be made")
			}
			ctx := testCtx(t, 2*time.Minute)
			conn, err := pgx.Connect(ctx, src.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			gid := strings.ReplaceAll(slotName(t), "_", "-")
			// A transaction that wrote has a transaction ID: the slot waits for it.
			for _, sql := range []string{"BEGIN", fmt.Sprintf("INSERT INTO w VALUES (%d)", i)} {
				if _, err := conn.Exec(ctx, sql); err != nil {
					t.Fatal(err)
				}
			}
			says := []string{fmt.Sprintf("pid %d (idle in transaction, ", conn.PgConn().PID()), "database " + db + ")"}
			end := "COMMIT"
			if tt.prepared {
				if _, err := conn.Exec(ctx, "PREPARE TRANSACTION '"+gid+"'"); err != nil {
					t.Fatal(err)
				}
				says = []string{fmt.Sprintf("prepared transaction %q (", gid), "database " + db + ": COMMIT PREPARED"}
				end = "COMMIT PREPARED '" + gid + "'"
			}

			logs := &logLines{}
			slot := slotName(t)
			src.dropSlotAtEnd(slot)
			type ensured struct {
				res *SetupResult
				err error
			}
			done := make(chan ensured, 1)
			go func() {
				if tt.temporary {
					snap, err := ExportTemporaryLogged(ctx, src.pg, slot, slog.New(logs), 300*time.Millisecond)
					if err == nil {
						snap.Release()
					}
					done <- ensured{&SetupResult{SlotCreated: err == nil}, err}
					return
				}
				res, err := Ensure(ctx, src.pg, Setup{Slot: slot, Publication: slot + "_pub", Tables: []Table{{"public", "w"}},
					Log: slog.New(logs), WaitReport: 300 * time.Millisecond})
				done <- ensured{res, err}
			}()
			for logs.find(says...) == "" {
				select {
				case e := <-done:
					t.Fatalf("Ensure returned (%+v, %v) while the transaction was open; log:\n%s", e.res, e.err, logs)
				case <-ctx.Done():
					t.Fatalf("no line says %q; log:\n%s", says, logs)
				case <-time.After(100 * time.Millisecond):
				}
			}
			if line := logs.find(says...); !strings.HasPrefix(line, "INFO cdc: slot "+slot+": creating it has waited ") {
				t.Errorf("the line: %s", line)
			}
			if _, err := conn.Exec(ctx, end); err != nil {
				t.Fatal(err)
			}
			e := <-done
			if e.err != nil || !e.res.SlotCreated {
				t.Fatalf("Ensure: %+v, %v", e.res, e.err)
			}
			if logs.find("INFO cdc: slot "+slot+": created after waiting ", " for transactions to end") == "" {
				t.Errorf("no line says the slot was created; log:\n%s", logs)
			}
			t.Logf("log:\n%s", logs)
		})
	}
}
