package kafkastate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// check runs kafka-state check with cfg into a fresh working directory.
func (e *env) check(t *testing.T, cfg Config) (*CheckResult, error) {
	t.Helper()
	return Check(testCtx(t, 2*time.Minute), cfg, Env{Dir: kestra.Dir{Path: t.TempDir()}})
}

// wantCheck checks a check's outcome: no problem when want is empty, else
// ErrCheckFailed (configuration) wrapping each of want, one problem each.
func wantCheck(t *testing.T, res *CheckResult, err error, want ...error) {
	t.Helper()
	if res == nil {
		t.Fatalf("no result: %v", err)
	}
	for _, p := range res.Problems {
		t.Logf("problem: %v", p)
	}
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("check: %v, want no problem", err)
		}
		return
	}
	if !errors.Is(err, ErrCheckFailed) || outcome.Classify(err) != outcome.Config || len(res.Problems) != len(want) {
		t.Errorf("check: %v (%s, %d problems), want ErrCheckFailed with %d, configuration", err, outcome.Classify(err), len(res.Problems), len(want))
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Errorf("no problem is %v", w)
		}
	}
	for _, p := range res.Problems {
		if Hint(p) == "" {
			t.Errorf("problem %v has no fix", p)
		}
	}
}

// TestCheckFindsWhatMaterializeWouldMeet: kafka-state check on a topic and
// a database materialize would take counts what it would read and changes
// nothing; a schema not set up and a topic that does not exist are both
// reported by one check; saved positions past the log end are reported as
// materialize refuses them; a topic that is not compacted is a note.
func TestCheckFindsWhatMaterializeWouldMeet(t *testing.T) {
	e := newBareEnv(t)
	res, err := e.check(t, e.config())
	wantCheck(t, res, err, ErrNotSetUp, ErrTopicUnavailable)

	e = newTopicEnv(t, 2)
	produce(t, e.kcl, e.topic, kv(0, "a", `1`), kv(1, "b", `2`), kv(1, "c", `3`))
	before := e.snapshot(t)
	res, err = e.check(t, e.config())
	wantCheck(t, res, err)
	if res.Partitions != 2 || res.Behind != 3 {
		t.Errorf("check: %d partitions, %d behind; want 2 and 3", res.Partitions, res.Behind)
	}
	if after := e.snapshot(t); after != before {
		t.Errorf("the check changed the database:\n%s\nwant\n%s", after, before)
	}
	e.mustRun(t)
	if res, err = e.check(t, e.config()); err != nil || res.Behind != 0 {
		t.Errorf("check after a run that read everything: %v, behind %d", err, res.Behind)
	}
	e.exec(t, `UPDATE kafka_state.positions SET next_offsets = '{"0": 1, "1": 99}' WHERE topic = $1`, e.topic)
	res, err = e.check(t, e.config())
	wantCheck(t, res, err, ErrOffsetPastEnd)
	if err != nil && !strings.Contains(err.Error(), "partition 1") {
		t.Errorf("the problem does not name the partition: %v", err)
	}

	e = newEnv(t)
	createTopic(t, e.adm, e.topic, 1, map[string]*string{"cleanup.policy": ptr("delete")})
	res, err = e.check(t, e.config())
	wantCheck(t, res, err)
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "is not compacted (cleanup.policy=delete)") {
		t.Errorf("notes %v, want one saying the topic is not compacted", res.Notes)
	}
}

// TestCheckPrivilegesAndALockedRow: a role that may read and write the
// positions and records but lacks what a batch also uses (TEMPORARY for
// the staging table, SELECT on current_values, the shards table) gets
// one problem naming each; a positions row a running batch holds is a
// note after a few seconds, not a silent wait nor a problem.
func TestCheckPrivilegesAndALockedRow(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `1`))
	e.mustRun(t)
	role := testenv.UniqueName(t, "ks_role_")
	testenv.CreateRole(t, e.adminPG, role, "role-pw")
	t.Cleanup(func() { testenv.ExecPostgres(t, e.pg.DSN, `DROP OWNED BY `+role) }) // before the role is dropped
	for _, sql := range []string{
		`GRANT USAGE ON SCHEMA kafka_state TO ` + role,
		`GRANT SELECT, INSERT, UPDATE ON kafka_state.positions, kafka_state.records TO ` + role,
		`REVOKE TEMPORARY ON DATABASE "` + dbName(t, e.pg.DSN) + `" FROM PUBLIC`,
	} {
		e.exec(t, sql)
	}
	cfg := e.config()
	cfg.Postgres.DSN = testenv.WithPassword(t, testenv.WithUser(t, e.pg.DSN, role), "role-pw")
	res, err := e.check(t, cfg)
	wantCheck(t, res, err, ErrPGPrivileges)
	for _, w := range []string{"TEMPORARY on the database", "SELECT on kafka_state.current_values", "INSERT on kafka_state.shards"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("the problem does not name %s: %v", w, err)
		}
	}
	if err != nil && strings.Contains(err.Error(), "kafka_state.rejected") {
		t.Errorf("kafka_state.rejected named without ON_BAD_RECORD=reject: %v", err)
	}

	conn := e.conn(t)
	ctx := testCtx(t, time.Minute)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT * FROM kafka_state.positions WHERE topic = $1 FOR UPDATE`, e.topic); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err = e.check(t, e.config())
	wantCheck(t, res, err)
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the check waited %s for the locked row", took)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "locked by a running batch") {
		t.Errorf("notes %v, want one saying the positions are locked", res.Notes)
	}
}

// dbName is the database a DSN names.
func dbName(t *testing.T, dsn string) string {
	t.Helper()
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cc.Database
}
