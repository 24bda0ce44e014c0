package cdc

import (
	"context"

	"github.com/changesink/changesink/tasks/cdc/initload"
	"github.com/changesink/changesink/tasks/cdc/slotsync"
)

// The env contract of cdc sync (and of cdc setup given a source), declared
// by slotsync, whose messages name them (see slotsync's constants).
const (
	EnvPostgresDSN      = slotsync.EnvPostgresDSN
	EnvPostgresUsername = slotsync.EnvPostgresUsername
	EnvPostgresPassword = slotsync.EnvPostgresPassword
	EnvSlot             = slotsync.EnvSlot
	EnvPublication      = slotsync.EnvPublication
	EnvTables           = slotsync.EnvTables
	EnvMaxChanges       = slotsync.EnvMaxChanges
	EnvMaxDuration      = slotsync.EnvMaxDuration
	EnvFlushChanges     = slotsync.EnvFlushChanges
	EnvLoadWorkers      = slotsync.EnvLoadWorkers
	EnvResync           = slotsync.EnvResync
)

// Defaults and bounds of the sync settings (slotsync's).
const (
	DefaultSlot         = slotsync.DefaultSlot
	DefaultPublication  = slotsync.DefaultPublication
	DefaultMaxDuration  = slotsync.DefaultMaxDuration
	DefaultFlushChanges = slotsync.DefaultFlushChanges
	DefaultLoadWorkers  = slotsync.DefaultLoadWorkers
	MaxLoadWorkers      = slotsync.MaxLoadWorkers
	LoadBlockRows       = initload.DefaultBlockRows
)

// SyncConfig is everything Sync needs, and what SetupSync needs to create
// the publication and the slot and load the tables (slotsync.Config);
// Postgres is how to reach the source database.
type (
	SyncConfig = slotsync.Config
	Postgres   = slotsync.Postgres
)

// SyncResult is the outcome of a sync run (slotsync.Result), SyncTable
// one table's share of it; SyncSetupResult is what SetupSync ensured and
// loaded (slotsync.SetupResult), LoadStats what its initial load copied
// (initload.Stats).
type (
	SyncResult      = slotsync.Result
	SyncTable       = slotsync.TableResult
	SyncSetupResult = slotsync.SetupResult
	LoadStats       = initload.Stats
)

// Sync streams the replication slot into the targets (slotsync.Sync):
// whole committed transactions, flush by flush, each table's rows applied
// and read back, the flush recorded in the sync ledger, and only then the
// slot confirmed.
func Sync(ctx context.Context, cfg SyncConfig, env Env) (*SyncResult, error) {
	return slotsync.Sync(ctx, cfg, env.sync())
}

// SetupSync prepares cdc sync (slotsync.SetupSync): the publication and
// the slot, every published table's target and, when it creates the slot,
// the initial load from the slot's exported snapshot.
func SetupSync(ctx context.Context, cfg SyncConfig, env Env) (*SyncSetupResult, error) {
	return slotsync.SetupSync(ctx, cfg, env.sync())
}

// CheckResult is what Check found (slotsync.CheckResult).
type CheckResult = slotsync.CheckResult

// Check reads the source, the target and the mapping as cdc setup would
// use them, creating nothing (slotsync.Check): every problem setup would
// refuse on at once, each with its remedy (Hint), and the notes worth
// reading first. It fails (ErrPreflight, configuration) when it found a
// problem; its result lists them all.
func Check(ctx context.Context, cfg SyncConfig, env Env) (*CheckResult, error) {
	res, err := slotsync.Check(ctx, cfg, env.sync())
	if res != nil {
		for i := range res.Problems {
			res.Problems[i].Fix = Hint(res.Problems[i].Err)
		}
	}
	return res, err
}

// sync is the Env of a cdc sync run: the logger, and the tests' hooks.
func (e Env) sync() slotsync.Env { return slotsync.Env{Log: e.Log, Hooks: e.hooks} }
