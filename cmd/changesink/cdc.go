package main

import (
	"path/filepath"
	"strconv"
	"time"

	"github.com/alecthomas/kong"

	// Time zone data for DateTime64 columns when the image has no zoneinfo.
	_ "time/tzdata"

	"github.com/changesink/changesink/tasks/cdc"
)

// cdcCmd groups the cdc commands (owned by tasks/cdc).
type cdcCmd struct {
	Setup cdcSetupCmd `cmd:"" help:"Create the ClickHouse ReplacingMergeTree target table and its live view from the mapping. Idempotent."`
	Apply cdcApplyCmd `cmd:"" help:"Apply one Debezium Ion batch to ClickHouse, then read it back and verify."`
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
	}
}

// cdcConn is the ClickHouse connection and the mapping, shared by both commands.
type cdcConn struct {
	Mapping  string        `name:"mapping" env:"${CDCEnvMapping}" required:"" help:"Path of the table mapping YAML (relative to the working directory)."`
	URL      string        `name:"clickhouse-url" env:"${CDCEnvClickHouseURL}" required:"" help:"clickhouse-go DSN: clickhouse://host:9000/db (native; TLS: ?secure=true), http://host:8123/db or https://host:8443/db."`
	Username string        `name:"clickhouse-username" env:"${CDCEnvClickHouseUsername}" help:"ClickHouse user; overrides the DSN's."`
	Password string        `name:"clickhouse-password" env:"${CDCEnvClickHousePassword}" help:"ClickHouse password; overrides the DSN's. Never printed."`
	CAFile   string        `name:"clickhouse-ca-file" env:"${CDCEnvClickHouseCAFile}" help:"PEM file of the CA that signed the server's TLS certificate (relative to the working directory), instead of the system trust store; needs secure=true in the URL."`
	Timeout  time.Duration `name:"clickhouse-timeout" env:"${CDCEnvClickHouseTimeout}" default:"${CDCDefaultTimeout}" help:"Deadline of each ClickHouse call (connect, each query, the insert)."`
}

// config registers the secrets, loads the mapping and builds the task config.
func (c *cdcConn) config(a *app) (cdc.Config, error) {
	a.mask.Add(c.Password)
	a.mask.AddDSN(c.URL)
	m, err := cdc.LoadMapping(resolve(a, c.Mapping))
	if err != nil {
		return cdc.Config{}, err
	}
	return cdc.Config{
		Mapping:    m,
		ClickHouse: cdc.ClickHouse{URL: c.URL, Username: c.Username, Password: c.Password, CAFile: resolve(a, c.CAFile), Timeout: c.Timeout},
	}, nil
}

// resolve makes a relative path relative to the working directory.
func resolve(a *app, path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(a.dir.Path, path)
}

type cdcSetupCmd struct {
	cdcConn
}

func (c *cdcSetupCmd) Run(a *app) error {
	cfg, err := c.config(a)
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
