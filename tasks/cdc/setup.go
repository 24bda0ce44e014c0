package cdc

import (
	"context"
	"fmt"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// SetupResult reports what setup ensured.
type SetupResult struct {
	Table, View, ServerVersion string
	// Statements are the statements run, in order.
	Statements []string
}

// Outputs implements kestra.Result.
func (r *SetupResult) Outputs() map[string]any {
	return map[string]any{"table": r.Table, "view": r.View, "server_version": r.ServerVersion}
}

// Metrics implements kestra.Result.
func (r *SetupResult) Metrics() []kestra.Metric { return nil }

// Summary is the one-line log of the run.
func (r *SetupResult) Summary() string {
	return fmt.Sprintf("Target %s and view %s are in place on ClickHouse %s.", r.Table, r.View, r.ServerVersion)
}

// Setup creates (if absent) the target database when the mapping asks and
// the ReplacingMergeTree table, checks that an existing table matches the
// mapping (ErrTargetMismatch), then creates the live view and checks that
// it is a view of the mapped columns (ErrTargetMismatch), and creates the
// ledger (target.Table.EnsureLedger). It is idempotent. A mapping the server cannot store
// is a configuration error (ErrUnsupportedServer, outcome.Config): a
// DateTime64 column on a server older than 20.1, a Decimal of more than 38
// digits (Decimal256) on one older than 21.6.
func Setup(ctx context.Context, cfg Config, env Env) (*SetupResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := cfg.Mapping
	t, err := target.Connect(ctx, cfg.ClickHouse, m)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	if err := t.CheckSupported(); err != nil {
		return nil, err
	}
	stmts, err := t.Setup(ctx)
	if err != nil {
		return nil, err
	}
	return &SetupResult{
		Table:         m.Target.Database + "." + m.Target.Table,
		View:          m.Target.Database + "." + m.Target.LiveView,
		ServerVersion: t.Version,
		Statements:    stmts,
	}, nil
}
