package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	// Time zone data for DateTime64 columns when the image has no zoneinfo.
	_ "time/tzdata"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc"
)

// cdcCmd groups the cdc commands (owned by tasks/cdc).
type cdcCmd struct {
	Setup cdcSetupCmd `cmd:"" help:"Create the ClickHouse ReplacingMergeTree targets and their live views from the mapping. Idempotent. Given a source (CDC_POSTGRES_DSN): also the publication and the replication slot for cdc sync, and the initial load of every table from the new slot's snapshot."`
	Apply cdcApplyCmd `cmd:"" help:"Apply one Debezium Ion batch to ClickHouse, then read it back and verify."`
	Sync  cdcSyncCmd  `cmd:"" help:"Stream PostgreSQL's replication slot into the ClickHouse targets until caught up or a budget ends, confirming the slot only after every target's read-back."`
	Check cdcCheckCmd `cmd:"" help:"Check the source, the target and the mapping as cdc setup (given a source) would use them, creating nothing: every problem setup would refuse on, each with its fix, and what is worth knowing first (slots nobody reads that hold WAL, transactions a new slot waits for). Exit 0 only when setup would succeed."`
}

// cdcVars are the env names, defaults and bounds the cdc flags take from
// tasks/cdc (declared there because its errors name the variables):
// env:"${CDCEnvMapping}" in a tag.
func cdcVars() kong.Vars {
	return kong.Vars{
		"CDCEnvMapping":            cdc.EnvMapping,
		"CDCEnvClickHouseURL":      cdc.EnvClickHouseURL,
		"CDCEnvClickHouseUsername": cdc.EnvClickHouseUsername,
		"CDCEnvClickHousePassword": cdc.EnvClickHousePassword,
		"CDCEnvClickHouseCAFile":   cdc.EnvClickHouseCAFile,
		"CDCEnvClickHouseTimeout":  cdc.EnvClickHouseTimeout,
		"CDCEnvBatchFile":          cdc.EnvBatchFile,
		"CDCEnvWorkers":            cdc.EnvWorkers,
		"CDCDefaultTimeout":        cdc.DefaultTimeout.String(),
		"CDCDefaultBatchFile":      cdc.DefaultBatchFile,
		"CDCMaxWorkers":            strconv.Itoa(cdc.MaxWorkers),
		"CDCEnvPostgresDSN":        cdc.EnvPostgresDSN,
		"CDCEnvPostgresUsername":   cdc.EnvPostgresUsername,
		"CDCEnvPostgresPassword":   cdc.EnvPostgresPassword,
		"CDCEnvSlot":               cdc.EnvSlot,
		"CDCEnvPublication":        cdc.EnvPublication,
		"CDCEnvTables":             cdc.EnvTables,
		"CDCEnvMaxChanges":         cdc.EnvMaxChanges,
		"CDCEnvMaxDuration":        cdc.EnvMaxDuration,
		"CDCEnvFlushChanges":       cdc.EnvFlushChanges,
		"CDCEnvLoadWorkers":        cdc.EnvLoadWorkers,
		"CDCEnvResync":             cdc.EnvResync,
		"CDCDefaultLoadWorkers":    strconv.Itoa(cdc.DefaultLoadWorkers),
		"CDCMaxLoadWorkers":        strconv.Itoa(cdc.MaxLoadWorkers),
		"CDCLoadBlockRows":         strconv.Itoa(cdc.LoadBlockRows),
		"CDCDefaultSlot":           cdc.DefaultSlot,
		"CDCDefaultPublication":    cdc.DefaultPublication,
		"CDCDefaultMaxDuration":    cdc.DefaultMaxDuration.String(),
		"CDCDefaultFlushChanges":   strconv.Itoa(cdc.DefaultFlushChanges),
	}
}

// cdcConn is the ClickHouse connection and the mapping, shared by cdc
// setup and apply.
type cdcConn struct {
	Mapping string `name:"mapping" env:"${CDCEnvMapping}" required:"" help:"Path of the table mapping YAML (relative to the working directory)."`
	cdcTarget
}

// cdcTarget is the ClickHouse connection every cdc command takes.
type cdcTarget struct {
	URL      string        `name:"clickhouse-url" env:"${CDCEnvClickHouseURL}" required:"" help:"clickhouse-go DSN, clickhouse://host:9000/db (native; TLS: ?secure=true), http://host:8123/db or https://host:8443/db."`
	Username string        `name:"clickhouse-username" env:"${CDCEnvClickHouseUsername}" help:"ClickHouse user; overrides the DSN's."`
	Password string        `name:"clickhouse-password" env:"${CDCEnvClickHousePassword}" help:"ClickHouse password; overrides the DSN's. Never printed."`
	CAFile   string        `name:"clickhouse-ca-file" env:"${CDCEnvClickHouseCAFile}" help:"PEM file of the CA that signed the server's TLS certificate (relative to the working directory), instead of the system trust store; needs secure=true in the URL."`
	Timeout  time.Duration `name:"clickhouse-timeout" env:"${CDCEnvClickHouseTimeout}" default:"${CDCDefaultTimeout}" help:"Deadline of each ClickHouse call (connect, each query, the insert)."`
}

// config registers the secrets, loads the mapping and builds the task config.
func (c *cdcConn) config(a *app) (cdc.Config, error) {
	if c.Mapping == "" { // cdc setup without a source, and without a mapping: Validate names it
		return cdc.Config{ClickHouse: c.clickHouse(a)}, nil
	}
	m, err := cdc.LoadMapping(resolve(a, c.Mapping))
	if err != nil {
		return cdc.Config{}, err
	}
	return cdc.Config{Mapping: m, ClickHouse: c.clickHouse(a)}, nil
}

// clickHouse registers the secrets and returns the target server's settings.
func (c *cdcTarget) clickHouse(a *app) cdc.ClickHouse {
	a.mask.Add(c.Password)
	a.mask.AddDSN(c.URL)
	return cdc.ClickHouse{URL: c.URL, Username: c.Username, Password: c.Password, CAFile: resolve(a, c.CAFile), Timeout: c.Timeout}
}

// cdcSource is the source database and its slot, for cdc sync and for cdc
// setup given a source.
type cdcSource struct {
	DSN         string   `name:"postgres-dsn" env:"${CDCEnvPostgresDSN}" help:"The source database, as a URL (postgres://host:5432/db?sslmode=...) or key=value string; its role needs REPLICATION. Its password is never printed."`
	Username    string   `name:"postgres-username" env:"${CDCEnvPostgresUsername}" help:"PostgreSQL user; overrides the DSN's."`
	Password    string   `name:"postgres-password" env:"${CDCEnvPostgresPassword}" help:"PostgreSQL password; overrides the DSN's. Never printed."`
	Slot        string   `name:"slot" env:"${CDCEnvSlot}" default:"${CDCDefaultSlot}" help:"The logical replication slot (pgoutput)."`
	Publication string   `name:"publication" env:"${CDCEnvPublication}" default:"${CDCDefaultPublication}" help:"The publication whose tables are synced."`
	Mapping     string   `name:"mapping" env:"${CDCEnvMapping}" help:"Path of the mapping YAML (one table, or tables: with defaults:); optional: a table without an entry is mapped from the source's catalog."`
	Resync      []string `name:"resync" env:"${CDCEnvResync}" sep:"," help:"Published tables (schema.table, comma-separated) to load again from a new snapshot before going on: an operator's resync, which also releases a held table. Every run given it loads them again: set it for one run."`
}

// syncConfig registers the secrets, loads the mapping set (when given) and
// builds the sync config.
func (c *cdcSource) syncConfig(a *app, t *cdcTarget) (cdc.SyncConfig, error) {
	a.mask.Add(c.Password)
	a.mask.AddDSN(c.DSN)
	cfg := cdc.SyncConfig{Postgres: cdc.Postgres{DSN: c.DSN, User: c.Username, Password: c.Password}, Slot: c.Slot,
		Publication: c.Publication, ClickHouse: t.clickHouse(a), Resync: nonEmpty(c.Resync)}
	if c.Mapping != "" {
		set, err := cdc.LoadMappingSet(resolve(a, c.Mapping))
		if err != nil {
			return cfg, err
		}
		cfg.Mappings = set
	}
	return cfg, nil
}

// resolve makes a relative path relative to the working directory.
func resolve(a *app, path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(a.dir.Path, path)
}

// cdcSetupCmd is cdc setup. Tables is setup's alone: cdc sync streams
// what the publication publishes, so it takes no table list.
type cdcSetupCmd struct {
	cdcSource
	Tables []string `name:"tables" env:"${CDCEnvTables}" sep:"," help:"Tables to publish (schema.table, comma-separated), given a source: setup creates the publication with them, or adds to it those it lacks; none: the mapping file's tables."`
	cdcTarget
	LoadWorkers int `name:"load-workers" env:"${CDCEnvLoadWorkers}" default:"${CDCDefaultLoadWorkers}" help:"Connections the initial load reads the tables with at once (1 to ${CDCMaxLoadWorkers}), each holding a block of up to ${CDCLoadBlockRows} rows."`
}

// Run sets up the mapping's target, or, given a source, the publication,
// the slot, every published table's target and their initial load.
func (c *cdcSetupCmd) Run(a *app) error {
	if c.DSN != "" {
		cfg, err := c.syncConfig(a, &c.cdcTarget)
		if err != nil {
			return err
		}
		cfg.Tables, cfg.LoadWorkers = c.Tables, c.LoadWorkers
		res, err := cdc.SetupSync(a.ctx, cfg, cdc.Env{Dir: a.dir, Log: a.log})
		if err != nil {
			return err
		}
		a.log.Info(res.Summary())
		return a.em.Report(res)
	}
	if len(c.Resync) > 0 {
		return outcome.Config.Mark(fmt.Errorf("%w: %s is for cdc setup and sync given a source (%s)", cdc.ErrConfig, cdc.EnvResync, cdc.EnvPostgresDSN))
	}
	conn := cdcConn{Mapping: c.Mapping, cdcTarget: c.cdcTarget}
	cfg, err := conn.config(a)
	if err != nil {
		return err
	}
	res, err := cdc.Setup(a.ctx, cfg, cdc.Env{Dir: a.dir, Log: a.log})
	if err != nil {
		return err
	}
	a.log.Info(res.Summary())
	return a.em.Report(res)
}

// cdcCheckCmd is cdc check: what cdc setup given a source takes.
type cdcCheckCmd struct {
	cdcSource
	Tables []string `name:"tables" env:"${CDCEnvTables}" sep:"," help:"Tables setup would publish (schema.table, comma-separated); none: the mapping file's tables, and the publication's."`
	cdcTarget
}

// Run checks, then prints each problem with its fix and each note, then
// the outputs; it fails (exit 2) when it found a problem.
func (c *cdcCheckCmd) Run(a *app) error {
	cfg, err := c.syncConfig(a, &c.cdcTarget)
	if err != nil {
		return err
	}
	cfg.Tables = nonEmpty(c.Tables)
	res, err := cdc.Check(a.ctx, cfg, cdc.Env{Dir: a.dir, Log: a.log})
	if res == nil {
		return err
	}
	for i, p := range res.Problems {
		a.log.Error(fmt.Sprintf("problem %d of %d, %s: %v", i+1, len(res.Problems), p.Area, p.Err))
		if p.Fix != "" {
			a.log.Error("  fix: " + p.Fix)
		}
	}
	for _, n := range res.Notes {
		a.log.Warn(fmt.Sprintf("note, %s: %s", n.Area, n.Text))
	}
	a.log.Info(res.Summary())
	if rerr := a.em.Report(res); rerr != nil && err == nil {
		return rerr
	}
	return err
}

type cdcSyncCmd struct {
	cdcSource
	cdcTarget
	MaxChanges   int64         `name:"max-changes" env:"${CDCEnvMaxChanges}" default:"0" help:"Stop once this many changes are applied (at a transaction's end); 0: no limit."`
	MaxDuration  time.Duration `name:"max-duration" env:"${CDCEnvMaxDuration}" default:"${CDCDefaultMaxDuration}" help:"Stop taking new transactions after this long, then apply what was taken (fits a run every minute)."`
	FlushChanges int           `name:"flush-changes" env:"${CDCEnvFlushChanges}" default:"${CDCDefaultFlushChanges}" help:"Apply, verify and confirm the slot every this many changes (at a transaction's end)."`
}

func (c *cdcSyncCmd) Run(a *app) error {
	cfg, err := c.syncConfig(a, &c.cdcTarget)
	if err != nil {
		return err
	}
	cfg.MaxChanges, cfg.MaxDuration, cfg.FlushChanges = c.MaxChanges, c.MaxDuration, c.FlushChanges
	res, err := cdc.Sync(a.ctx, cfg, cdc.Env{Dir: a.dir, Log: a.log})
	if res != nil {
		// With a held table the run fails, its outputs (held among them)
		// kept: the other tables were applied.
		a.log.Info(res.Summary())
		if rerr := a.em.Report(res); rerr != nil && err == nil {
			return rerr
		}
	}
	return err
}

// nonEmpty drops empty items of a comma-separated setting (an empty
// variable is no item).
func nonEmpty(items []string) []string {
	var out []string
	for _, it := range items {
		if it = strings.TrimSpace(it); it != "" {
			out = append(out, it)
		}
	}
	return out
}

type cdcApplyCmd struct {
	cdcConn
	BatchFile string `name:"batch-file" env:"${CDCEnvBatchFile}" default:"${CDCDefaultBatchFile}" help:"The Debezium INLINE batch (text or binary Ion), relative to the working directory."`
	Workers   int    `name:"workers" env:"${CDCEnvWorkers}" default:"0" help:"Decoding workers: 0 = GOMAXPROCS (the CPUs this process may use: the machine's, or fewer under a container's CPU limit); at most ${CDCMaxWorkers}."`
}

func (c *cdcApplyCmd) Run(a *app) error {
	cfg, err := c.config(a)
	if err != nil {
		return err
	}
	cfg.BatchFile = resolve(a, c.BatchFile)
	cfg.Workers = c.Workers
	res, err := cdc.Apply(a.ctx, cfg, cdc.Env{Dir: a.dir, Log: a.log})
	if err != nil {
		return err
	}
	a.log.Info(res.Summary())
	return a.em.Report(res)
}
