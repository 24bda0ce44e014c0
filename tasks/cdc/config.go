package cdc

import (
	"fmt"
	"log/slog"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/target"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
)

// The env contract of cdc setup and apply, declared here because the
// errors name the variables: cmd/changesink reads them (its flags take
// these names, and override them) and fills a Config. This package never
// reads the environment.
const (
	EnvMapping            = "CDC_MAPPING"    // the file LoadMapping reads into Config.Mapping
	EnvBatchFile          = "CDC_BATCH_FILE" // Config.BatchFile
	EnvWorkers            = "CDC_WORKERS"    // Config.Workers
	EnvClickHouseURL      = target.EnvClickHouseURL
	EnvClickHouseUsername = target.EnvClickHouseUsername
	EnvClickHousePassword = target.EnvClickHousePassword
	EnvClickHouseCAFile   = target.EnvClickHouseCAFile
	EnvClickHouseTimeout  = target.EnvClickHouseTimeout
)

// Defaults and bounds of the settings.
const (
	// MaxWorkers bounds Config.Workers; 0 decodes with runtime.GOMAXPROCS(0)
	// workers (decodeFileWith).
	MaxWorkers = 64
	// DefaultBatchFile is the batch file cmd/changesink reads when
	// EnvBatchFile is unset.
	DefaultBatchFile = "changes.ion"
	// DefaultTimeout bounds each ClickHouse call when ClickHouse.Timeout
	// is 0.
	DefaultTimeout = target.DefaultTimeout
)

// Mapping describes one source table and its ClickHouse target
// (mapping.Mapping); ClickHouse is how to reach the target server.
type (
	Mapping    = mapping.Mapping
	ClickHouse = target.ClickHouse
)

// LoadMapping reads and checks the mapping file at path (mapping.Load).
func LoadMapping(path string) (*Mapping, error) { return mapping.Load(path) }

// LoadMappingSet reads and checks a mapping file of one table or many
// (mapping.LoadSet), for cdc sync.
func LoadMappingSet(path string) (*mapping.Set, error) { return mapping.LoadSet(path) }

// Config is everything Setup and Apply need.
type Config struct {
	// Mapping is the table mapping (LoadMapping). Required.
	Mapping *mapping.Mapping
	// ClickHouse is the target server. Required.
	ClickHouse target.ClickHouse
	// BatchFile is the Debezium INLINE batch, text or binary Ion. Apply only.
	BatchFile string
	// Workers decode the batch concurrently: 0 = runtime.GOMAXPROCS(0),
	// at most MaxWorkers.
	Workers int
}

// Validate checks the settings Setup and Apply share; Apply also needs the
// batch file (checkBatchFile).
func (c Config) Validate() error {
	switch {
	case c.Mapping == nil:
		return outcome.Config.Mark(fmt.Errorf("%w: no mapping (%s)", change.ErrConfig, EnvMapping))
	case c.ClickHouse.URL == "":
		return outcome.Config.Mark(fmt.Errorf("%w: no ClickHouse URL (%s)", change.ErrConfig, target.EnvClickHouseURL))
	case c.ClickHouse.Timeout < 0:
		return outcome.Config.Mark(fmt.Errorf("%w: negative ClickHouse timeout", change.ErrConfig))
	case c.ClickHouse.Timeout > 0 && c.ClickHouse.Timeout < target.MinTimeout:
		return outcome.Config.Mark(fmt.Errorf("%w: %s %s is under %s, too short for a ClickHouse call",
			change.ErrConfig, target.EnvClickHouseTimeout, c.ClickHouse.Timeout, target.MinTimeout))
	case c.Workers < 0 || c.Workers > MaxWorkers:
		return outcome.Config.Mark(fmt.Errorf("%w: %s %d outside 0..%d", change.ErrConfig, EnvWorkers, c.Workers, MaxWorkers))
	}
	return nil
}

// checkBatchFile refuses an Apply without a batch file.
func (c Config) checkBatchFile() error {
	if c.BatchFile == "" {
		return outcome.Config.Mark(fmt.Errorf("%w: no batch file (%s)", change.ErrConfig, EnvBatchFile))
	}
	return nil
}

// Env is what a run takes from where it runs rather than from its
// settings: the working directory its output files go to and its logger.
type Env struct {
	// Dir receives expected.jsonl and pending.jsonl (Apply).
	Dir kestra.Dir
	// Log receives progress and warnings (waiting for the target's lock,
	// breaking a killed run's lock, a live view made again); nil discards
	// them.
	Log *slog.Logger

	// hooks is a test seam (internal/testhook): unexported, set only by
	// this package's tests to stop a run at a chosen step (a crash after
	// the insert, a server that goes away mid-batch).
	hooks testhook.Hooks
}

// log is e.Log, or a logger that discards.
func (e Env) log() *slog.Logger {
	if e.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Log
}
