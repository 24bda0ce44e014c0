package slotsync

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// The env contract of cdc sync (and of cdc setup given a source): the
// source database reached with the replication protocol. The names of the
// secrets are the trigger flow's, so a flow moves from one to the other
// without new secrets.
const (
	EnvPostgresDSN      = "CDC_POSTGRES_DSN"      // Config.Source: a URL or key=value string
	EnvPostgresUsername = "CDC_POSTGRES_USERNAME" // overrides the DSN's user
	EnvPostgresPassword = "CDC_POSTGRES_PASSWORD" // overrides the DSN's password
	EnvSlot             = "CDC_SLOT"              // Config.Slot
	EnvPublication      = "CDC_PUBLICATION"       // Config.Publication
	EnvTables           = "CDC_TABLES"            // Config.Tables, comma-separated schema.table
	EnvMaxChanges       = "CDC_MAX_CHANGES"       // Config.MaxChanges
	EnvMaxDuration      = "CDC_MAX_DURATION"      // Config.MaxDuration
	EnvFlushChanges     = "CDC_FLUSH_CHANGES"     // Config.FlushChanges
	EnvLoadWorkers      = "CDC_LOAD_WORKERS"      // Config.LoadWorkers
	EnvResync           = "CDC_RESYNC"            // Config.Resync, comma-separated schema.table
)

// Defaults of the sync settings.
const (
	// DefaultSlot and DefaultPublication name what cdc setup creates.
	DefaultSlot        = "changesink"
	DefaultPublication = "changesink"
	// DefaultMaxDuration fits a run every minute: it stops taking new
	// transactions after 50 s and applies what it took.
	DefaultMaxDuration = 50 * time.Second
	// DefaultFlushChanges is how many changes a run gathers before it
	// applies them, verifies them and confirms the slot.
	DefaultFlushChanges = 100_000
	// maxFlushChanges bounds FlushChanges: a flush's rows are in memory.
	maxFlushChanges = 10_000_000
	// DefaultLoadWorkers is how many connections the initial load reads
	// with at once (PeerDB's default too); MaxLoadWorkers bounds it, and a
	// worker's block (one insert) holds up to initload.DefaultBlockRows rows.
	DefaultLoadWorkers = 4
	MaxLoadWorkers     = 64
	// idleWait is how long the stream may be quiet before the run counts
	// the slot as caught up.
	idleWait = time.Second
)

// Config is everything Sync needs, and what SetupSync needs to create the
// publication and the slot and load the tables.
type Config struct {
	// Postgres is the database the slot decodes. Required.
	Postgres Postgres
	// Slot and Publication name the replication slot and the publication.
	Slot, Publication string
	// Tables are the tables to publish (schema.table), for Setup; none:
	// the tables the mapping file lists.
	Tables []string
	// Mappings map the published tables to their targets (nil: every
	// table gets a mapping from the source's catalog and the defaults).
	Mappings *mapping.Set
	// ClickHouse is the target server. Required.
	ClickHouse target.ClickHouse
	// MaxChanges stops a run once it has applied this many changes (at a
	// transaction's end); 0: no limit.
	MaxChanges int64
	// MaxDuration stops a run from taking new transactions once it has run
	// this long; 0: DefaultMaxDuration.
	MaxDuration time.Duration
	// FlushChanges is how many changes a run gathers before it applies
	// them and confirms the slot (at a transaction's end); 0:
	// DefaultFlushChanges.
	FlushChanges int
	// LoadWorkers is how many connections the initial load reads chunks
	// with at once, each with a block of rows in memory; 0:
	// DefaultLoadWorkers.
	LoadWorkers int
	// Resync names published tables (schema.table) to load again from a
	// new snapshot before the run goes on: an operator's resync, which also
	// releases a held table. Each run given it loads them again.
	Resync []string

	// source is Postgres parsed (Validate).
	source *pgx.ConnConfig
}

// Postgres is how to reach the source database.
type Postgres struct {
	// DSN is a libpq URL or key=value string (CDC_POSTGRES_DSN); User and
	// Password, when set, override its own.
	DSN, User, Password string
}

// Validate checks the sync settings and fills in the defaults.
func (c *Config) Validate() error {
	switch {
	case c.Postgres.DSN == "":
		return outcome.Config.Mark(fmt.Errorf("%w: no source database (%s)", change.ErrConfig, EnvPostgresDSN))
	case c.ClickHouse.URL == "":
		return outcome.Config.Mark(fmt.Errorf("%w: no ClickHouse URL (%s)", change.ErrConfig, target.EnvClickHouseURL))
	case c.MaxChanges < 0:
		return outcome.Config.Mark(fmt.Errorf("%w: %s %d is negative", change.ErrConfig, EnvMaxChanges, c.MaxChanges))
	case c.MaxDuration < 0:
		return outcome.Config.Mark(fmt.Errorf("%w: %s %s is negative", change.ErrConfig, EnvMaxDuration, c.MaxDuration))
	case c.FlushChanges < 0 || c.FlushChanges > maxFlushChanges:
		return outcome.Config.Mark(fmt.Errorf("%w: %s %d outside 0..%d", change.ErrConfig, EnvFlushChanges, c.FlushChanges, maxFlushChanges))
	case c.LoadWorkers < 0 || c.LoadWorkers > MaxLoadWorkers:
		return outcome.Config.Mark(fmt.Errorf("%w: %s %d outside 0..%d", change.ErrConfig, EnvLoadWorkers, c.LoadWorkers, MaxLoadWorkers))
	}
	if c.Slot == "" {
		c.Slot = DefaultSlot
	}
	if c.Publication == "" {
		c.Publication = DefaultPublication
	}
	if c.MaxDuration == 0 {
		c.MaxDuration = DefaultMaxDuration
	}
	if c.FlushChanges == 0 {
		c.FlushChanges = DefaultFlushChanges
	}
	if c.LoadWorkers == 0 {
		c.LoadWorkers = DefaultLoadWorkers
	}
	if c.Mappings == nil {
		c.Mappings = &mapping.Set{}
	}
	if where, cluster := c.Mappings.Cluster(); cluster != "" {
		// Its sync ledger and initial load are one server's
		// (docs/design/clickhouse-cluster.md). Refused before either
		// server is reached: with the source down the run would otherwise
		// fail transient, and setup would make the publication and slot.
		return outcome.Config.Mark(fmt.Errorf("%w: %s: target.cluster is %q, and cdc sync does not write targets on a cluster yet (nothing was created)",
			change.ErrConfig, where, cluster))
	}
	// A table without a target database goes to the URL's (clickhouse://
	// host:9000/db, http://host:8123/db, ?database=db), not to the
	// server's default.
	c.Mappings.DefaultDatabase(c.ClickHouse.Database())
	src, err := pgx.ParseConfig(c.Postgres.DSN)
	if err != nil {
		// pgx's message may quote the DSN, password and all: not shown.
		return outcome.Config.Mark(fmt.Errorf("%w: %s is not a PostgreSQL connection string (a URL postgres://… or key=value pairs)",
			change.ErrConfig, EnvPostgresDSN))
	}
	if c.Postgres.User != "" {
		src.User = c.Postgres.User
	}
	if c.Postgres.Password != "" {
		src.Password = c.Postgres.Password
	}
	c.source = src
	return nil
}
