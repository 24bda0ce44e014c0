package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/changesink/changesink/tasks/kafkastate"
)

// kafkaStateCmd groups the kafka-state commands (owned by tasks/kafkastate).
type kafkaStateCmd struct {
	Setup       kafkaStateSetupCmd       `cmd:"" help:"Create schema kafka_state (positions, records, current_values) with the seed's DDL, and changesink's tables shards and rejected. Idempotent; safe when two run at once."`
	Materialize kafkaStateMaterializeCmd `cmd:"" help:"Materialize one bounded batch of the topic into PostgreSQL, records and positions in one transaction; with DRAIN_SECONDS, batch after batch until caught up."`
	Verify      kafkaStateVerifyCmd      `cmd:"" help:"Check that every stored record is below its partition's durable next offset; exit 1 naming the first one that is not."`
	Check       kafkaStateCheckCmd       `cmd:"" help:"Check, with materialize's settings and changing nothing, what materialize would meet before it reads a record: PostgreSQL (the schema, the role's privileges), the broker and the topic, the saved positions against the topic; every problem at once, each with its fix, and the records left to read. Exit 0 only when materialize would run."`
}

// kafkaStateVars are the names, defaults and bounds the kafka-state flags
// take from tasks/kafkastate (the seed's env contract, declared there
// because its errors name the variables): env:"${EnvTopic}" in a tag.
func kafkaStateVars() kong.Vars {
	itoa := strconv.Itoa
	return kong.Vars{
		"EnvTopic":            kafkastate.EnvTopic,
		"EnvMaxRecords":       kafkastate.EnvMaxRecords,
		"EnvPollSeconds":      kafkastate.EnvPollSeconds,
		"EnvDrainSeconds":     kafkastate.EnvDrainSeconds,
		"EnvShard":            kafkastate.EnvShard,
		"MaxShards":           itoa(kafkastate.MaxShards),
		"EnvKafkaProperties":  kafkastate.EnvKafkaProperties,
		"EnvPGDSN":            kafkastate.EnvPGDSN,
		"EnvPGUser":           kafkastate.EnvPGUser,
		"EnvPGPassword":       kafkastate.EnvPGPassword,
		"EnvReportOnly":       kafkastate.EnvReportOnly,
		"EnvOnBadRecord":      kafkastate.EnvOnBadRecord,
		"OnBadRecordRefuse":   kafkastate.OnBadRecordRefuse,
		"OnBadRecordReject":   kafkastate.OnBadRecordReject,
		"DefaultMaxRecords":   itoa(kafkastate.DefaultMaxRecords),
		"MinMaxRecords":       itoa(kafkastate.MinMaxRecords),
		"MaxMaxRecords":       itoa(kafkastate.MaxMaxRecords),
		"DefaultPollSeconds":  itoa(kafkastate.DefaultPollSeconds),
		"MinPollSeconds":      itoa(kafkastate.MinPollSeconds),
		"MaxPollSeconds":      itoa(kafkastate.MaxPollSeconds),
		"DefaultDrainSeconds": itoa(kafkastate.DefaultDrainSeconds),
		"MaxDrainSeconds":     itoa(kafkastate.MaxDrainSeconds),
	}
}

// kafkaStatePG is the PostgreSQL connection, as the seed's psycopg.connect
// reads it.
type kafkaStatePG struct {
	DSN      string `name:"pg-dsn" env:"${EnvPGDSN}" required:"" help:"PostgreSQL connection: URL (postgres://host:5432/db?sslmode=...) or key=value string. Its password is never printed."`
	User     string `name:"pg-user" env:"${EnvPGUser}" help:"PostgreSQL user, used when ${EnvPGDSN} names none."`
	Password string `name:"pg-password" env:"${EnvPGPassword}" help:"PostgreSQL password, used when ${EnvPGDSN} has none. Never printed."`
}

// postgres registers the secrets with the masker and returns the task's
// connection settings.
func (p *kafkaStatePG) postgres(a *app) kafkastate.Postgres {
	a.mask.Add(p.Password)
	a.mask.AddDSN(p.DSN)
	return kafkastate.Postgres{DSN: p.DSN, User: p.User, Password: p.Password}
}

type kafkaStateSetupCmd struct {
	kafkaStatePG
}

func (c *kafkaStateSetupCmd) Run(a *app) error {
	pg := c.postgres(a)
	res, err := kafkastate.Setup(a.ctx, pg)
	if err != nil {
		return err
	}
	a.log.Info("kafka-state: schema kafka_state is ready")
	return a.em.Report(res)
}

type kafkaStateMaterializeCmd struct {
	Topic           string  `name:"topic" env:"${EnvTopic}" required:"" help:"Compacted topic with UTF-8 keys, JSON values and a fixed partition count."`
	MaxRecords      seedInt `name:"max-records" env:"${EnvMaxRecords}" default:"${DefaultMaxRecords}" help:"Most records one batch reads over all partitions: ${MinMaxRecords}..${MaxMaxRecords} (default ${default})."`
	PollSeconds     seedInt `name:"poll-seconds" env:"${EnvPollSeconds}" default:"${DefaultPollSeconds}" help:"How long the batch may fetch: ${MinPollSeconds}..${MaxPollSeconds} seconds (default ${default}). A fully read topic returns at once."`
	DrainSeconds    seedInt `name:"drain-seconds" env:"${EnvDrainSeconds}" default:"${DefaultDrainSeconds}" help:"Drain mode: commit batch after batch (each its own transaction with its positions, as one batch is) until every partition is read to its end or this many seconds have passed, logging progress: 0..${MaxDrainSeconds} (default ${default}: one batch, as the seed)."`
	Shard           string  `name:"shard" env:"${EnvShard}" help:"Partition shard i/n: only the partitions p with p mod n = i (0 <= i < n <= ${MaxShards}), under their own locks, so that n runs read the topic in parallel; claimed in kafka_state.shards (another layout claiming one of them is refused). Empty (default): the whole topic."`
	OnBadRecord     string  `name:"on-bad-record" env:"${EnvOnBadRecord}" default:"${OnBadRecordRefuse}" help:"What a record whose key or value cannot be read does (null key, key not UTF-8, value not JSON, ...): ${OnBadRecordRefuse} (default, the seed's rule) refuses the batch; ${OnBadRecordReject} keeps it aside in kafka_state.rejected, in the batch's transaction, and applies the other records."`
	KafkaProperties string  `name:"kafka-properties" env:"${EnvKafkaProperties}" required:"" help:"JSON object of librdkafka client properties: bootstrap.servers (required), client.id, security.protocol, sasl.mechanism(s), sasl.username, sasl.password, ssl.ca.location or ssl.ca.pem, ssl.certificate.location or ssl.certificate.pem, ssl.key.location or ssl.key.pem, ssl.key.password, ssl.endpoint.identification.algorithm. Secrets in it are never printed."`
	kafkaStatePG
}

func (c *kafkaStateMaterializeCmd) Run(a *app) error {
	// Register every secret before anything can print.
	a.mask.Add(kafkastate.PropertySecrets(c.KafkaProperties)...)
	pg := c.postgres(a)
	cfg := kafkastate.Config{
		Topic:           c.Topic,
		MaxRecords:      int(c.MaxRecords),
		PollSeconds:     int(c.PollSeconds),
		DrainSeconds:    int(c.DrainSeconds),
		Shard:           c.Shard,
		KafkaProperties: c.KafkaProperties,
		OnBadRecord:     c.OnBadRecord,
		Postgres:        pg,
	}
	res, err := kafkastate.Materialize(a.ctx, cfg, kafkastate.Env{Dir: a.dir, Log: a.log})
	if err != nil {
		return err
	}
	a.log.Info(res.Summary())
	return a.em.Report(res)
}

// kafkaStateCheckCmd is kafka-state check: materialize's settings.
type kafkaStateCheckCmd struct {
	kafkaStateMaterializeCmd
}

func (c *kafkaStateCheckCmd) Run(a *app) error {
	a.mask.Add(kafkastate.PropertySecrets(c.KafkaProperties)...)
	cfg := kafkastate.Config{Topic: c.Topic, MaxRecords: int(c.MaxRecords), PollSeconds: int(c.PollSeconds), DrainSeconds: int(c.DrainSeconds),
		Shard: c.Shard, KafkaProperties: c.KafkaProperties, OnBadRecord: c.OnBadRecord, Postgres: c.postgres(a)}
	res, err := kafkastate.Check(a.ctx, cfg, kafkastate.Env{Dir: a.dir, Log: a.log})
	if res == nil {
		return err
	}
	for i, p := range res.Problems {
		a.log.Error(fmt.Sprintf("problem %d of %d: %v", i+1, len(res.Problems), p))
		if h := kafkastate.Hint(p); h != "" {
			a.log.Error("  fix: " + h)
		}
	}
	for _, n := range res.Notes {
		a.log.Warn("note: " + n)
	}
	a.log.Info(res.Summary())
	if rerr := a.em.Report(res); rerr != nil && err == nil {
		return rerr
	}
	return err
}

type kafkaStateVerifyCmd struct {
	Topic      string `name:"topic" env:"${EnvTopic}" required:"" help:"The topic whose stored records to check."`
	ReportOnly bool   `name:"report-only" env:"${EnvReportOnly}" help:"When a record is ahead of its durable position, log the refusal at ERROR, report valid=false and exit 0, so that the flow decides (the seed's If and Fail tasks); without it, verify exits 1."`
	kafkaStatePG
}

func (c *kafkaStateVerifyCmd) Run(a *app) error {
	pg := c.postgres(a)
	res, err := kafkastate.Verify(a.ctx, pg, c.Topic)
	var ahead *kafkastate.AheadError
	if c.ReportOnly && errors.As(err, &ahead) {
		a.log.Error("kafka-state: " + err.Error())
		return a.em.Report(&kafkastate.VerifyResult{Topic: c.Topic, Ahead: ahead})
	}
	if err != nil {
		return err
	}
	if !res.HasPositions {
		a.log.Warn("kafka-state: topic " + c.Topic + " has no saved positions in kafka_state.positions: nothing was materialized for it yet, so there is nothing to verify; check TOPIC")
	} else {
		a.log.Info("kafka-state: every stored record of topic " + c.Topic + " is below its partition's durable next offset")
	}
	if res.Rejected > 0 {
		a.log.Warn(fmt.Sprintf("kafka-state: topic %s: %d records were kept aside in kafka_state.rejected (ON_BAD_RECORD=reject); their keys keep their earlier values",
			c.Topic, res.Rejected))
	}
	return a.em.Report(res)
}

// seedInt is an integer setting read as the seed reads MAX_RECORDS and
// POLL_SECONDS, with Python's int(): decimal digits with an optional sign,
// surrounding whitespace and single underscores between digits allowed;
// anything else is a configuration error. (kong's int parser takes base
// prefixes, so "0b11" would be 3 and "010" 8, where the seed refuses the
// first and reads 10.)
type seedInt int

var seedIntSyntax = regexp.MustCompile(`^[+-]?[0-9]+(_[0-9]+)*$`)

// Decode implements kong.MapperValue.
func (n *seedInt) Decode(ctx *kong.DecodeContext) error {
	var s string
	if err := ctx.Scan.PopValueInto("int", &s); err != nil {
		return err
	}
	t := strings.TrimSpace(s)
	v, err := strconv.ParseInt(strings.ReplaceAll(t, "_", ""), 10, strconv.IntSize)
	if !seedIntSyntax.MatchString(t) || err != nil {
		return fmt.Errorf("expected a decimal integer but got %q", s)
	}
	*n = seedInt(v)
	return nil
}
