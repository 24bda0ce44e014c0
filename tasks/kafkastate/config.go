package kafkastate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/redact"
)

// The seed's env contract, declared here because Validate's errors name the
// variables: cmd/changesink reads them (its flags take these names, and
// override them) and fills a Config. This package never reads the
// environment.
const (
	EnvTopic           = "TOPIC"            // Config.Topic
	EnvMaxRecords      = "MAX_RECORDS"      // Config.MaxRecords
	EnvPollSeconds     = "POLL_SECONDS"     // Config.PollSeconds
	EnvDrainSeconds    = "DRAIN_SECONDS"    // Config.DrainSeconds
	EnvShard           = "SHARD"            // Config.Shard
	EnvKafkaProperties = "KAFKA_PROPERTIES" // Config.KafkaProperties
	EnvPGDSN           = "PG_DSN"           // Postgres.DSN
	EnvPGUser          = "PGUSER"           // Postgres.User
	EnvPGPassword      = "PGPASSWORD"       // Postgres.Password
	EnvOnBadRecord     = "ON_BAD_RECORD"    // Config.OnBadRecord
	// EnvReportOnly is verify's switch (the seed's If and Fail tasks): a
	// record ahead of its position is reported (VerifyResult.Ahead) instead
	// of refused.
	EnvReportOnly = "REPORT_ONLY"
)

// Bounds and defaults of the batch, as in the seed's flow inputs.
const (
	DefaultMaxRecords = 1000
	MinMaxRecords     = 1
	MaxMaxRecords     = 100000

	DefaultPollSeconds = 10
	MinPollSeconds     = 1
	MaxPollSeconds     = 60

	// DrainSeconds: 0 is the seed's one batch per run.
	DefaultDrainSeconds = 0
	MaxDrainSeconds     = 3600

	// MaxShards bounds the n of a SHARD i/n.
	MaxShards = 1024
)

// The values of ON_BAD_RECORD (Config.OnBadRecord).
const (
	// OnBadRecordRefuse is the seed's rule and the default: a record that
	// cannot be decoded refuses the batch, and nothing is committed.
	OnBadRecordRefuse = "refuse"
	// OnBadRecordReject keeps such a record aside in kafka_state.rejected,
	// in the batch's transaction, and applies the others.
	OnBadRecordReject = "reject"
)

// applicationName names changesink's sessions in pg_stat_activity unless
// the DSN sets application_name.
const applicationName = "changesink kafka-state"

// errInvalidTopic marks a topic name Kafka would not accept.
var errInvalidTopic = errors.New("invalid topic name")

// Postgres says how to reach PostgreSQL, the way the seed's
// psycopg.connect(PG_DSN) with PGUSER and PGPASSWORD in the environment does.
type Postgres struct {
	// DSN is PG_DSN: a libpq connection URL (postgres://host:5432/db?...)
	// or keyword/value string (host=... dbname=...).
	DSN string
	// User is PGUSER, used when the DSN names no user (libpq precedence).
	User string
	// Password is PGPASSWORD, used when the DSN has no password.
	Password string
}

// Config is one materialize run. The zero value is not valid; use Validate.
type Config struct {
	// Topic is TOPIC: a compacted topic with UTF-8 keys, JSON values and a
	// fixed partition count.
	Topic string
	// MaxRecords is MAX_RECORDS, 1..100000 (default 1000): the most records
	// one batch reads, over all partitions.
	MaxRecords int
	// PollSeconds is POLL_SECONDS, 1..60 (default 10): how long the batch
	// may fetch. A run over a fully read topic returns at once.
	PollSeconds int
	// DrainSeconds is DRAIN_SECONDS, 0..3600 (default 0, one batch as the
	// seed): when set, the run commits batch after batch (each of at most
	// MaxRecords records and PollSeconds of fetching, each one transaction
	// with its positions) until every partition is read to its end or this
	// many seconds have passed since the run began; no batch starts after
	// that, and a batch's fetching ends by then.
	DrainSeconds int
	// Shard is SHARD: "" (default) for the whole topic, or "i/n" (0 <= i <
	// n <= 1024) for the partitions p with p mod n = i. A shard run locks
	// only its partitions (and the topic in shared mode, so whole-topic runs
	// and the seed's script wait for it), claims them in kafka_state.shards
	// (another shard claiming one of them is refused: ErrShardOverlap) and
	// writes only their entries of the topic's positions row.
	Shard string
	// KafkaProperties is KAFKA_PROPERTIES: a JSON object of librdkafka
	// client properties (see ParseProperties).
	KafkaProperties string
	// OnBadRecord is ON_BAD_RECORD: "" or "refuse" (default, the seed's
	// rule) refuses a batch holding a record whose key or value breaks a
	// record rule (the RecordError sentinels found while reading: ErrNullKey,
	// ErrKeyNotUTF8, ErrKeyNUL, ErrValueNotUTF8, ErrValueNotJSON,
	// ErrNonFinite); "reject" keeps such a record aside in
	// kafka_state.rejected, in the batch's transaction, leaves its key's
	// stored value as it was, and applies the batch's other records.
	// ErrKeyTooLong and ErrValueTooLarge, which PostgreSQL finds as it
	// writes the batch, stay refusals in both modes.
	OnBadRecord string
	// Postgres is where the state lives.
	Postgres Postgres
}

// Env is what a run takes from where it runs rather than from its
// settings: the working directory batch-report.json goes to and the logger.
type Env struct {
	// Dir receives batch-report.json, after the commit.
	Dir kestra.Dir
	// Log receives progress, warnings and the debug timings of each batch's
	// phases; nil discards them.
	Log *slog.Logger

	// hooks is a test seam: unexported, set only by this package's tests to
	// act at a chosen step of a batch (kill its backend, cancel the run,
	// change the topic).
	hooks hooks
}

// log is e.Log, or a logger that discards.
func (e Env) log() *slog.Logger {
	if e.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Log
}

// hooks are test seams inside one run. The zero value does nothing.
type hooks struct {
	// beforeRecheck runs after the batch is fetched and merged, before the
	// end-of-batch topic re-check: tests delete, recreate or repartition the
	// topic here to exercise "topic changed during this batch".
	beforeRecheck func(ctx context.Context) error
	// duringCopy runs once, from the COPY's row source, after the first row
	// has been handed to PostgreSQL: tests kill the backend here.
	duringCopy func(ctx context.Context)
	// afterFetch runs once the batch has been fetched and copied, before
	// the tombstone rule's check of the reads: tests make the reads late.
	afterFetch func()
	// beforeCommit runs right before the run checks its context for the
	// last time and sends COMMIT: tests stop the run (cancel its context)
	// here or, a little later, while the COMMIT is in flight.
	beforeCommit func()
	// inDoubtWaitOverride, when set, replaces the constant inDoubtWait as
	// the bound on how long a batch whose COMMIT answer was lost asks what
	// became of it: tests shorten the wait.
	inDoubtWaitOverride time.Duration
	// commitTimeout, when set, replaces pgTimeout as the COMMIT's bound:
	// tests make a COMMIT waiting for a synchronous standby outlast it.
	commitTimeout time.Duration
	// onConflict forces the INSERT ... ON CONFLICT merge (PostgreSQL < 15)
	// on a server that has MERGE, so tests cover both statements.
	onConflict bool
	// progressEvery, when set, replaces the constant progressEvery: tests
	// see a drain's progress lines without waiting for them.
	progressEvery time.Duration
	// maxRejectedBytes, when set, replaces the constant maxRejectedBytes:
	// tests reach the bound with a few records.
	maxRejectedBytes int
}

func configErr(format string, args ...any) error {
	return outcome.Config.Mark(fmt.Errorf(format, args...))
}

// Validate checks every field (the seed's 'Invalid topic or batch bounds',
// plus the properties and the DSN). Errors are configuration errors
// (outcome.Config) naming the variable and its range.
func (c Config) Validate() error {
	if err := ValidateTopic(c.Topic); err != nil {
		return err
	}
	if c.MaxRecords < MinMaxRecords || c.MaxRecords > MaxMaxRecords {
		return configErr("%s must be %d..%d, got %d", EnvMaxRecords, MinMaxRecords, MaxMaxRecords, c.MaxRecords)
	}
	if c.PollSeconds < MinPollSeconds || c.PollSeconds > MaxPollSeconds {
		return configErr("%s must be %d..%d, got %d", EnvPollSeconds, MinPollSeconds, MaxPollSeconds, c.PollSeconds)
	}
	if c.DrainSeconds < 0 || c.DrainSeconds > MaxDrainSeconds {
		return configErr("%s must be 0..%d, got %d", EnvDrainSeconds, MaxDrainSeconds, c.DrainSeconds)
	}
	if _, err := ParseShard(c.Shard); err != nil {
		return err
	}
	if _, err := ParseProperties(c.KafkaProperties); err != nil {
		return err
	}
	if _, err := c.rejects(); err != nil {
		return err
	}
	return c.Postgres.Validate()
}

// rejects reads OnBadRecord: whether bad records are kept aside (reject)
// rather than refused; any other value than refuse, reject or "" is a
// configuration error.
func (c Config) rejects() (bool, error) {
	switch c.OnBadRecord {
	case "", OnBadRecordRefuse:
		return false, nil
	case OnBadRecordReject:
		return true, nil
	}
	return false, configErr("%s %q: want %s (default: a bad record refuses the batch) or %s (kept aside in kafka_state.rejected)",
		EnvOnBadRecord, c.OnBadRecord, OnBadRecordRefuse, OnBadRecordReject)
}

// Shard is a set of a topic's partitions: those p with p mod Count = Index.
// The zero value (Count 0) is the whole topic.
type Shard struct{ Index, Count int }

// ParseShard reads SHARD: "" (the whole topic) or "i/n" with 0 <= i < n <=
// MaxShards, decimal. Anything else is a configuration error.
func ParseShard(s string) (Shard, error) {
	if s == "" {
		return Shard{}, nil
	}
	a, b, ok := strings.Cut(s, "/")
	i, errI := strconv.Atoi(a)
	n, errN := strconv.Atoi(b)
	if !ok || errI != nil || errN != nil || strconv.Itoa(i) != a || strconv.Itoa(n) != b || n < 1 || n > MaxShards || i < 0 || i >= n {
		return Shard{}, configErr("%s %q: want i/n, the partitions p with p mod n = i, 0 <= i < n <= %d (e.g. 0/4); empty for the whole topic",
			EnvShard, s, MaxShards)
	}
	return Shard{Index: i, Count: n}, nil
}

// Whole reports whether s is the whole topic.
func (s Shard) Whole() bool { return s.Count == 0 }

// String is SHARD's form: "i/n", "" for the whole topic.
func (s Shard) String() string {
	if s.Whole() {
		return ""
	}
	return strconv.Itoa(s.Index) + "/" + strconv.Itoa(s.Count)
}

// Owns reports whether partition p is in the shard.
func (s Shard) Owns(p int32) bool { return s.Whole() || int(p)%s.Count == s.Index }

// of returns the partitions of the shard among partitions (sorted).
func (s Shard) of(partitions []int32) []int32 {
	var out []int32
	for _, p := range partitions {
		if s.Owns(p) {
			out = append(out, p)
		}
	}
	return out
}

// ValidateTopic checks a topic name the way Kafka does: 1..249 characters
// from [a-zA-Z0-9._-], not "." or "..". The error is a configuration error.
func ValidateTopic(topic string) error {
	bad := topic == "" || len(topic) > 249 || topic == "." || topic == ".."
	for _, r := range topic {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			bad = true
		}
	}
	if bad {
		return configErr("%s %q: %w: a topic name is 1..249 characters from a-z A-Z 0-9 . _ -", EnvTopic, topic, errInvalidTopic)
	}
	return nil
}

// Validate checks that the DSN is set and parses. The error never shows the
// password.
func (p Postgres) Validate() error {
	_, err := p.connConfig()
	return err
}

// connConfig parses the DSN and applies User and Password where the DSN sets
// none, as libpq applies PGUSER and PGPASSWORD.
func (p Postgres) connConfig() (*pgx.ConnConfig, error) {
	if strings.TrimSpace(p.DSN) == "" {
		return nil, configErr("%s is required: a PostgreSQL connection URL or key=value string", EnvPGDSN)
	}
	if redact.JDBCURL(p.DSN) {
		// pgx would read it as a key=value string that names nothing, and
		// connect to the local socket as the OS user: the error would
		// blame authentication. The DSN is not quoted (its password).
		return nil, configErr("%w (it is a JDBC URL, as the seed flow's KAFKA_STATE_JDBC_URL)", ErrJDBCURL)
	}
	cc, err := pgx.ParseConfig(p.DSN)
	if err != nil {
		return nil, configErr("%s cannot be parsed: %s", EnvPGDSN, parseProblem(err))
	}
	for _, h := range hosts(cc) {
		if strings.Contains(h, "@") {
			// libpq's rule: the userinfo ends at the first '@', so an
			// unescaped '@' in the password made its tail the host name.
			// The host is not printed: it holds part of the password.
			return nil, configErr("%s: a host name holds an '@', so the user or password in the URL holds an unescaped '@': "+
				"percent-encode it as %%40 (and '/' as %%2F, ':' in the user as %%3A)", EnvPGDSN)
		}
	}
	hasUser, hasPassword := dsnSets(p.DSN)
	if !hasUser && p.User != "" {
		cc.User = p.User
	}
	if !hasPassword && p.Password != "" {
		cc.Password = p.Password
	}
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = applicationName
	}
	return cc, nil
}

// parseProblem says what is wrong in a DSN pgx could not parse, without the
// DSN: pgx's *pgconn.ParseConfigError reads "cannot parse `<DSN>`: <what>
// (<cause>)", its DSN redacted by a pattern (password=...) that not every
// keyword/value spelling matches ("password = x", "password=a\ b"), so only
// what follows the DSN is kept: which setting is wrong and why (the file
// sslrootcert names, the value of connect_timeout). A *url.Error, which
// quotes the whole DSN, gives its cause alone.
func parseProblem(err error) string {
	var ue *url.Error
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &ue) && errors.As(err, &pe) {
		s := pe.Error()
		if i := strings.LastIndex(s, "`: "); i >= 0 && strings.HasPrefix(s, "cannot parse `") {
			return s[i+len("`: "):]
		}
	}
	return innermost(err)
}

// innermost returns the text of the deepest wrapped error, without a URL
// (a *url.Error quotes the whole DSN, password included).
func innermost(err error) string {
	for {
		var ue *url.Error
		if errors.As(err, &ue) {
			return ue.Err.Error()
		}
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

// hosts returns every host cc connects to (multi-host DSNs give fallbacks).
func hosts(cc *pgx.ConnConfig) []string {
	out := []string{cc.Host}
	for _, f := range cc.Fallbacks {
		out = append(out, f.Host)
	}
	return out
}

// dsnSets reports whether a DSN names a user and a password itself. A URL is
// read as libpq and pgx read it (not as net/url does): the userinfo runs to
// the first '@' before any '/', so a '#' or '?' in the password is part of
// it; user and password query parameters count too.
func dsnSets(dsn string) (user, password bool) {
	rest, ok := strings.CutPrefix(dsn, "postgresql://")
	if !ok {
		rest, ok = strings.CutPrefix(dsn, "postgres://")
	}
	if ok {
		if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
			u, pw, hasPW := strings.Cut(rest[:i], ":")
			user, password = u != "", hasPW && pw != ""
			rest = rest[i+1:]
		}
		if i := strings.IndexByte(rest, '?'); i >= 0 {
			for _, kv := range strings.Split(rest[i+1:], "&") {
				k, v, _ := strings.Cut(kv, "=")
				k, _ = url.QueryUnescape(k)
				user = user || (k == "user" && v != "")
				password = password || (k == "password" && v != "")
			}
		}
		return user, password
	}
	for _, k := range dsnKeywords(dsn) {
		switch k {
		case "user":
			user = true
		case "password":
			password = true
		}
	}
	return user, password
}

// dsnKeywords returns the keywords of a libpq keyword/value string
// (`key = value`, values optionally single-quoted with backslash escapes).
func dsnKeywords(dsn string) []string {
	var keys []string
	s := dsn
	for {
		s = strings.TrimLeft(s, " \t\n\r")
		if s == "" {
			return keys
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return keys
		}
		keys = append(keys, strings.TrimSpace(s[:eq]))
		s = strings.TrimLeft(s[eq+1:], " \t\n\r")
		if strings.HasPrefix(s, "'") {
			i := 1
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			s = s[min(i+1, len(s)):]
			continue
		}
		end := strings.IndexAny(s, " \t\n\r")
		if end < 0 {
			return keys
		}
		s = s[end:]
	}
}
