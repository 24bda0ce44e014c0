package slotsync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/pgvalue"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// Areas of a Problem or a Note: what to look at.
const (
	AreaSource  = "source"
	AreaTarget  = "target"
	AreaMapping = "mapping"
)

// Problem is one refusal cdc check found that setup would meet: where
// (Area), and the refusal (Err: its message, its class, its remedy). Fix
// is the remedy, which the caller fills from its hints table.
type Problem struct {
	Area string
	Err  error
	Fix  string
}

// Note is what an operator should know though setup would go on.
type Note struct {
	Area, Text string
}

// CheckResult is what cdc check found: every problem at once, and the
// notes; the servers it reached and the tables it looked at.
type CheckResult struct {
	Slot, Publication            string
	SourceVersion, TargetVersion string
	Tables                       []string
	Problems                     []Problem
	Notes                        []Note
	Total                        time.Duration
}

// Check reads the source, the target and the mapping as cdc setup would
// use them and creates nothing: every problem setup would refuse on, at
// once, and what is worth knowing before it runs (slots nobody reads that
// hold WAL, transactions a new slot waits for). It fails (ErrPreflight:
// configuration, transient when every problem is) when it found a
// problem; its result lists them all.
func Check(ctx context.Context, cfg Config, env Env) (*CheckResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &syncRun{cfg: cfg, env: env, log: env.log(), start: time.Now()}
	res := r.preflight(ctx)
	return res, res.refusal()
}

// refusal is nil when res found no problem, else ErrPreflight numbering
// them, wrapping every problem's refusal: configuration (each asks a
// person to change something before setup), or transient when every
// problem is (the servers away: a retry may find none).
func (res *CheckResult) refusal() error {
	if len(res.Problems) == 0 {
		return nil
	}
	kind := outcome.Transient
	for _, p := range res.Problems {
		if outcome.Classify(p.Err) != outcome.Transient {
			kind = outcome.Config
		}
	}
	return kind.Mark(&PreflightError{Problems: res.Problems})
}

// PreflightError is the problems cdc check, or setup before it creates
// anything, found: errors.Is finds each one's refusal.
type PreflightError struct{ Problems []Problem }

func (e *PreflightError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = fmt.Sprintf("(%d) %s: %v", i+1, p.Area, p.Err)
	}
	return fmt.Sprintf("%v: %d found, nothing was created: %s", change.ErrPreflight, len(e.Problems), strings.Join(msgs, "; "))
}

func (e *PreflightError) Unwrap() []error {
	out := []error{change.ErrPreflight}
	for _, p := range e.Problems {
		out = append(out, p.Err)
	}
	return out
}

// checkBeforeSetup is setup's first step: the problems preflight finds,
// before anything is created. One problem is returned as it is (its own
// class and remedy); several as a PreflightError. Its notes are logged.
func (r *syncRun) checkBeforeSetup(ctx context.Context) error {
	res := r.preflight(ctx)
	for _, n := range res.Notes {
		r.log.Warn(fmt.Sprintf("cdc: %s: %s", n.Area, n.Text))
	}
	switch len(res.Problems) {
	case 0:
		return nil
	case 1:
		return res.Problems[0].Err
	}
	return res.refusal()
}

// preflight runs every check: the source's (slot.Check), the target's,
// then the mapping of each table against both.
func (r *syncRun) preflight(ctx context.Context) *CheckResult {
	res := &CheckResult{Slot: r.cfg.Slot, Publication: r.cfg.Publication}
	problem := func(area string, err error) { res.Problems = append(res.Problems, Problem{Area: area, Err: err}) }
	tables, err := r.publishedTables()
	if err != nil {
		problem(AreaSource, err)
	}
	slices.SortFunc(tables, func(a, b slot.Table) int { return strings.Compare(a.String(), b.String()) })
	tables = slices.Compact(tables) // a table named twice is published once
	src := r.checkSource(ctx, tables, res, problem)
	ch := r.checkTarget(ctx, res, problem)
	if ch != nil {
		defer ch.Close()
	}
	if src != nil {
		r.checkMappings(ctx, withoutIdentityProblems(src, res.Problems), ch, problem)
	}
	for _, t := range src {
		res.Tables = append(res.Tables, t.qualified())
	}
	res.Total = time.Since(r.start)
	return res
}

// checkSource runs slot.Check and reads the catalog of the tables setup
// would publish (nil when the source cannot be read).
func (r *syncRun) checkSource(ctx context.Context, tables []slot.Table, res *CheckResult, problem func(string, error)) []sourceTable {
	conn := r.cfg.source.Copy()
	maps.Copy(conn.RuntimeParams, pgvalue.Settings())
	c, err := pgx.ConnectConfig(ctx, conn)
	if err != nil {
		problem(AreaSource, sourceErr(fmt.Errorf("connect to the source: %w", err)))
		return nil
	}
	defer c.Close(context.WithoutCancel(ctx))
	pf, err := slot.Check(ctx, c.PgConn(), slot.Setup{Slot: r.cfg.Slot, Publication: r.cfg.Publication, Tables: tables})
	if err != nil {
		problem(AreaSource, sourceErr(fmt.Errorf("read the source: %w", err)))
		return nil
	}
	res.SourceVersion = pf.Version
	for _, p := range pf.Problems {
		if len(tables) == 0 && errors.Is(p, slot.ErrConfig) {
			continue // no table to publish: reported (publishedTables)
		}
		problem(AreaSource, p)
	}
	for _, n := range pf.Notes {
		res.Notes = append(res.Notes, Note{Area: AreaSource, Text: n})
	}
	if _, r.source, err = systemIdentity(ctx, c); err != nil {
		problem(AreaSource, sourceErr(err))
		return nil
	}
	src, err := readNamedCatalog(ctx, c, r.cfg.Publication, tables)
	if err != nil {
		problem(AreaSource, sourceErr(err))
		return nil
	}
	return src
}

// checkTarget connects to ClickHouse and checks what setup needs of it:
// the mapping's databases exist, and the user may write (readonly). It
// returns the server (nil when it cannot be reached).
func (r *syncRun) checkTarget(ctx context.Context, res *CheckResult, problem func(string, error)) *target.Server {
	ch := r.cfg.ClickHouse
	ch.Conns = 1
	srv, err := target.Connect(ctx, ch, nil)
	if errors.Is(err, target.ErrNotSetUp) {
		// The database the URL names is missing: not "run setup first",
		// which is what the user is about to do.
		err = outcome.Config.Mark(fmt.Errorf("%w: the database %s names (%v)", change.ErrNoDatabase, target.EnvClickHouseURL, err))
	}
	if err != nil {
		problem(AreaTarget, err)
		return nil
	}
	res.TargetVersion = srv.Version
	if dbs := r.cfg.Mappings.Databases(); len(dbs) > 0 {
		missing, err := srv.MissingDatabases(ctx, dbs)
		if err != nil {
			problem(AreaTarget, err)
		}
		for _, db := range missing {
			problem(AreaTarget, outcome.Config.Mark(fmt.Errorf("%w: %s (nothing was created: no publication, no slot)", change.ErrNoDatabase, db)))
		}
	}
	if err := srv.CheckWritable(ctx); err != nil {
		problem(AreaTarget, err)
	}
	return srv
}

// withoutIdentityProblems is src without the tables a problem found no
// usable replica identity of: their mapping's missing key is that one
// problem again.
func withoutIdentityProblems(src []sourceTable, problems []Problem) []sourceTable {
	refused := map[string]bool{}
	for _, p := range problems {
		var te *slot.TableError
		if errors.As(p.Err, &te) && errors.Is(p.Err, slot.ErrReplicaIdentity) {
			refused[te.Table] = true
		}
	}
	var out []sourceTable
	for _, t := range src {
		if !refused[t.qualified()] {
			out = append(out, t)
		}
	}
	return out
}

// checkMappings maps every table as setup would: every column of a type
// no mapping is generated for (each one; a target that stands is mapped
// as it stands, and they are no problem of setup's), an entry's column or
// key the table lacks, two tables onto one target.
func (r *syncRun) checkMappings(ctx context.Context, src []sourceTable, ch *target.Server, problem func(string, error)) {
	set := r.cfg.Mappings
	var caps mapping.ServerCaps
	if ch != nil {
		caps = ch.Caps
	}
	var ms []*mapping.Mapping
	for _, t := range src {
		m, err := mapTable(set, r.source, withoutUnmapped(set, t, caps), caps)
		if err != nil {
			problem(AreaMapping, err)
			continue
		}
		ms = append(ms, m)
		if ch != nil {
			st, err := ch.With(m).Standing(ctx)
			if err != nil {
				problem(AreaTarget, fmt.Errorf("table %s: %w", t.qualified(), err))
				continue
			}
			if st.Found {
				if err := ch.With(m).CheckKind(ctx); err != nil {
					problem(AreaTarget, fmt.Errorf("table %s: %w", t.qualified(), err))
				}
				continue
			}
		}
		unmapped := false
		for _, c := range t.cols {
			if _, err := columnFor(set, t, c, caps); errors.Is(err, pgvalue.ErrUnsupportedType) {
				problem(AreaMapping, err)
				unmapped = true
			}
		}
		if !unmapped {
			if err := strictMapping(set, r.source, t, caps); err != nil {
				problem(AreaMapping, err)
			}
		}
	}
	if err := set.CheckDistinct(ms); err != nil {
		problem(AreaMapping, outcome.Config.Mark(err))
	}
}

// Outputs implements kestra.Result: ok, the counts, each problem (area,
// message, fix) and note, the servers' versions, the tables.
func (res *CheckResult) Outputs() map[string]any {
	problems := make([]any, len(res.Problems))
	for i, p := range res.Problems {
		problems[i] = map[string]any{"area": p.Area, "message": p.Err.Error(), "fix": p.Fix, "class": outcome.Classify(p.Err).String()}
	}
	notes := make([]any, len(res.Notes))
	for i, n := range res.Notes {
		notes[i] = map[string]any{"area": n.Area, "message": n.Text}
	}
	return map[string]any{"ok": len(res.Problems) == 0, "problems": problems, "notes": notes, "errors": len(res.Problems),
		"warnings": len(res.Notes), "slot": res.Slot, "publication": res.Publication, "tables": append([]string{}, res.Tables...),
		"source_version": res.SourceVersion, "target_version": res.TargetVersion}
}

// Metrics implements kestra.Result.
func (res *CheckResult) Metrics() []kestra.Metric {
	tags := map[string]string{"slot": res.Slot}
	return []kestra.Metric{kestra.Counter("problems", float64(len(res.Problems)), tags),
		kestra.Counter("notes", float64(len(res.Notes)), tags), kestra.Timer("duration", res.Total, tags)}
}

// Summary is the run's one-line log.
func (res *CheckResult) Summary() string {
	if len(res.Problems) == 0 {
		return fmt.Sprintf("cdc check: setup would succeed: %d tables, slot %s, publication %s (PostgreSQL %s, ClickHouse %s); %d notes.",
			len(res.Tables), res.Slot, res.Publication, res.SourceVersion, res.TargetVersion, len(res.Notes))
	}
	return fmt.Sprintf("cdc check: %d problems and %d notes; setup would refuse, and created nothing.", len(res.Problems), len(res.Notes))
}
