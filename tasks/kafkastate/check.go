package kafkastate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
)

// CheckResult is what Check found: every problem materialize would meet
// before it reads a record (each the refusal it would return, with its
// class and remedy: Hint), and what is worth knowing first (Notes).
type CheckResult struct {
	Topic string
	// Partitions are the partitions the run would read (its shard's);
	// Behind the records between the saved positions (or the log start)
	// and the end, which the next runs read; -1 when not known.
	Partitions int
	Behind     int64
	Problems   []error
	Notes      []string
	Total      time.Duration
}

// Check reads PostgreSQL and Kafka as materialize would before its first
// record, and changes nothing: the schema and the role's privileges, the
// broker and the topic (its partitions, its cleanup policy), the saved
// positions against the topic (another cluster or topic id, offsets
// outside the log, the tombstone rule). It takes no topic lock and no
// shard claim, and rolls back what it read in, so it runs beside a
// materialize. It fails (ErrCheckFailed,
// configuration) when it found a problem; its result lists them all.
func Check(ctx context.Context, cfg Config, env Env) (*CheckResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r, err := start(cfg, env)
	if err != nil {
		return nil, err
	}
	defer r.close()
	res := &CheckResult{Topic: r.topic, Behind: -1}
	pgOK := r.checkPostgres(ctx, res)
	b := &batch{r: r, ph: phases{last: time.Now()}}
	if err := b.describe(ctx); err != nil {
		res.Problems = append(res.Problems, err)
	} else {
		res.Partitions = len(b.parts)
		if !r.ret.compact {
			res.Notes = append(res.Notes, fmt.Sprintf("topic %s is not compacted (cleanup.policy=%s): retention deletes records without "+
				"tombstones, so kafka_state.records keeps every key ever read", r.topic, r.ret.policy))
		}
		if pgOK {
			if err := b.checkPositions(ctx, res); err != nil {
				res.Problems = append(res.Problems, err)
			}
		}
	}
	res.Total = time.Since(r.started)
	if len(res.Problems) > 0 {
		// Configuration, or transient when every problem is (the servers
		// away: a retry may find none).
		kind := outcome.Transient
		for _, p := range res.Problems {
			if outcome.Classify(p) != outcome.Transient {
				kind = outcome.Config
			}
		}
		return res, kind.Mark(&CheckError{Topic: r.topic, Problems: res.Problems})
	}
	return res, nil
}

// CheckError is the problems Check found: errors.Is finds each one.
type CheckError struct {
	Topic    string
	Problems []error
}

func (e *CheckError) Error() string {
	msg := fmt.Sprintf("topic %q: %v: %d found, nothing was changed", e.Topic, ErrCheckFailed, len(e.Problems))
	for i, p := range e.Problems {
		msg += fmt.Sprintf("; (%d) %v", i+1, p)
	}
	return msg
}

func (e *CheckError) Unwrap() []error { return append([]error{ErrCheckFailed}, e.Problems...) }

// checkPostgres connects, and checks that schema kafka_state is set up
// and that the role holds each privilege a batch uses (a table newer
// than the seed's DDL only where it exists; kafka_state.rejected only
// with ON_BAD_RECORD=reject); false when the positions cannot be read
// (or, lacking a privilege, their read would fail on it).
func (r *run) checkPostgres(ctx context.Context, res *CheckResult) bool {
	conn, err := r.connection(ctx)
	if err != nil {
		res.Problems = append(res.Problems, err)
		return false
	}
	var setUp, canCreate bool
	if err := queryRow(ctx, conn, "read kafka_state's tables", sqlCheckSchema, nil, &setUp, &canCreate); err != nil {
		res.Problems = append(res.Problems, err)
		return false
	}
	switch {
	case !setUp && !canCreate:
		res.Problems = append(res.Problems, outcome.Config.Mark(fmt.Errorf("%w, and %w: CREATE on the database, which setup needs",
			ErrNotSetUp, ErrPGPrivileges)))
		return false
	case !setUp:
		res.Problems = append(res.Problems, outcome.Config.Mark(ErrNotSetUp))
		return false
	}
	rows, err := conn.Query(ctx, sqlCheckPrivileges)
	if err != nil {
		res.Problems = append(res.Problems, pgErr(ctx, err, "read the role's privileges"))
		return false
	}
	missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		res.Problems = append(res.Problems, pgErr(ctx, err, "read the role's privileges"))
		return false
	}
	missing = slices.DeleteFunc(missing, func(p string) bool { return !r.reject && strings.HasSuffix(p, "kafka_state.rejected") })
	if len(missing) > 0 {
		// The positions are not read then: the read would fail on one of them.
		res.Problems = append(res.Problems, outcome.Config.Mark(fmt.Errorf("%w: the role lacks %s", ErrPGPrivileges, strings.Join(missing, ", "))))
		return false
	}
	return true
}

// checkPositions reads the saved positions as materialize does (their
// row FOR UPDATE: a running batch's commit is waited for, 3 s at most,
// then noted) in a transaction it rolls back, without the topic's lock, and plans the
// batch as materialize would: the refusals of its step 2. It counts what
// the next runs read.
func (b *batch) checkPositions(ctx context.Context, res *CheckResult) error {
	if err := b.requireRejected(ctx); err != nil {
		return err
	}
	conn, err := b.r.connection(ctx)
	if err != nil {
		return err
	}
	if b.tx, err = begin(ctx, conn); err != nil {
		return err
	}
	defer b.rollback(ctx)
	for _, s := range []struct{ what, sql string }{
		{"set statement_timeout", sqlStatementTimeout},
		{"set lock_timeout", sqlCheckLockTimeout},
	} {
		if err := execSQL(ctx, b.tx, s.what, s.sql); err != nil {
			return err
		}
	}
	if err := b.readPositions(ctx); errors.Is(err, ErrPGLockTimeout) {
		// A batch holds them now: not a problem of the settings.
		res.Notes = append(res.Notes, fmt.Sprintf("the saved positions of topic %s are locked by a running batch: they were not "+
			"checked against the topic; run the check again between batches", b.r.topic))
		return nil
	} else if err != nil {
		return err
	}
	if err := b.plan(ctx); err != nil {
		return err
	}
	res.Behind = 0
	for _, s := range b.states {
		res.Behind += s.end - s.start
	}
	return nil
}

// Outputs implements kestra.Result: ok, the problems (message, class,
// fix), the notes, the partitions and the records behind.
func (res *CheckResult) Outputs() map[string]any {
	problems := make([]any, len(res.Problems))
	for i, p := range res.Problems {
		problems[i] = map[string]any{"message": p.Error(), "class": outcome.Classify(p).String(), "fix": Hint(p)}
	}
	return map[string]any{"ok": len(res.Problems) == 0, "topic": res.Topic, "errors": len(res.Problems), "problems": problems,
		"notes": append([]string{}, res.Notes...), "partitions": res.Partitions, "behind": res.Behind}
}

// Metrics implements kestra.Result.
func (res *CheckResult) Metrics() []kestra.Metric {
	tags := map[string]string{"topic": res.Topic}
	return []kestra.Metric{kestra.Counter("problems", float64(len(res.Problems)), tags), kestra.Timer("duration", res.Total, tags)}
}

// Summary is the run's one-line log.
func (res *CheckResult) Summary() string {
	if len(res.Problems) > 0 {
		return fmt.Sprintf("kafka-state check: topic %s: %d problems; materialize would refuse, and nothing was changed.", res.Topic, len(res.Problems))
	}
	behind := "an unknown number of"
	if res.Behind >= 0 {
		behind = fmt.Sprint(res.Behind)
	}
	return fmt.Sprintf("kafka-state check: topic %s: materialize would run: %d partitions, %s records to read; %d notes.",
		res.Topic, res.Partitions, behind, len(res.Notes))
}
