package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/changesink/changesink/internal/kafkatest"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/kafkastate"
)

// TestKafkaStateHelp: --help of each kafka-state command lists every env
// variable of the seed's contract with its default and range.
func TestKafkaStateHelp(t *testing.T) {
	tests := []struct {
		cmd  string
		want []string
	}{
		{"materialize", []string{"$TOPIC", "$MAX_RECORDS", "1..100000 (default 1000)", "$POLL_SECONDS", "1..60 seconds (default 10)",
			"$KAFKA_PROPERTIES", "bootstrap.servers", "$PG_DSN", "$PGUSER", "$PGPASSWORD", "--max-records=1000", "--poll-seconds=10"}},
		{"setup", []string{"$PG_DSN", "$PGUSER", "$PGPASSWORD"}},
		{"verify", []string{"$TOPIC", "$PG_DSN", "$PGUSER", "$PGPASSWORD", "$REPORT_ONLY"}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			var out bytes.Buffer
			if code := run(context.Background(), []string{"kafka-state", tt.cmd, "--help"}, &out); code != 0 {
				t.Fatalf("exit %d: %s", code, out.String())
			}
			help := strings.Join(strings.Fields(out.String()), " ") // kong wraps lines
			for _, w := range tt.want {
				if !strings.Contains(help, w) {
					t.Errorf("help lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// TestKafkaStateBadSettings: settings that do not parse or are out of range
// exit 2 (configuration) before any I/O.
func TestKafkaStateBadSettings(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"max records not a number", map[string]string{kafkastate.EnvMaxRecords: "many"}, "MAX_RECORDS"},
		{"max records out of range", map[string]string{kafkastate.EnvMaxRecords: "100001"}, "MAX_RECORDS must be 1..100000"},
		{"poll seconds out of range", map[string]string{kafkastate.EnvPollSeconds: "0"}, "POLL_SECONDS must be 1..60"},
		{"unknown kafka property", map[string]string{kafkastate.EnvKafkaProperties: `{"bootstrap.servers":"x:1","acks":"all"}`}, `\"acks\" not supported`},
		{"no topic", map[string]string{kafkastate.EnvTopic: ""}, "missing required settings: TOPIC (flag --topic)"},
		{"no dsn", map[string]string{kafkastate.EnvPGDSN: ""}, "missing required settings: PG_DSN (flag --pg-dsn)"},
		{"no properties", map[string]string{kafkastate.EnvKafkaProperties: " "}, "missing required settings: KAFKA_PROPERTIES (flag --kafka-properties)"},
		{"unknown on bad record", map[string]string{kafkastate.EnvOnBadRecord: "skip"}, `ON_BAD_RECORD \"skip\": want refuse`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(kafkastate.EnvTopic, "customers")
			t.Setenv(kafkastate.EnvKafkaProperties, `{"bootstrap.servers":"127.0.0.1:1"}`)
			t.Setenv(kafkastate.EnvPGDSN, "postgres://u@127.0.0.1:1/db")
			t.Setenv(kafkastate.EnvMaxRecords, "")
			t.Setenv(kafkastate.EnvPollSeconds, "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if tt.env[kafkastate.EnvMaxRecords] == "" {
				os.Unsetenv(kafkastate.EnvMaxRecords)
			}
			if tt.env[kafkastate.EnvPollSeconds] == "" {
				os.Unsetenv(kafkastate.EnvPollSeconds)
			}
			var out bytes.Buffer
			code := run(context.Background(), []string{"--work-dir", t.TempDir(), "kafka-state", "materialize"}, &out)
			if code != 2 || !strings.Contains(out.String(), tt.want) || !strings.Contains(out.String(), `"error_class":"config"`) {
				t.Fatalf("exit %d, output:\n%s\nwant exit 2 naming %q", code, out.String(), tt.want)
			}
		})
	}
}

// TestKafkaStatePGDSNIsJDBCURL: the seed flow's KAFKA_STATE_JDBC_URL pasted
// into PG_DSN made setup connect to the local socket as the OS user ("failed
// to connect to user=changesink database=: ... Peer authentication failed").
// Every kafka-state command exits 2 before connecting, saying it is a JDBC
// URL and the form to use, and never prints the URL's password.
func TestKafkaStatePGDSNIsJDBCURL(t *testing.T) {
	const secret = "jdbc-Pw-" + "5f3a9c"
	t.Setenv(kafkastate.EnvTopic, "customers")
	t.Setenv(kafkastate.EnvKafkaProperties, `{"bootstrap.servers":"127.0.0.1:1"}`)
	t.Setenv(kafkastate.EnvPGDSN, "jdbc:postgresql://127.0.0.1:5432/db?user=changesink&password="+secret)
	t.Setenv(kafkastate.EnvPGUser, "")
	t.Setenv(kafkastate.EnvPGPassword, "")
	for _, cmd := range []string{"setup", "materialize", "verify"} {
		t.Run(cmd, func(t *testing.T) {
			var out bytes.Buffer
			code := run(context.Background(), []string{"--work-dir", t.TempDir(), "kafka-state", cmd}, &out)
			if code != 2 || !strings.Contains(out.String(), `"error_class":"config"`) ||
				!strings.Contains(out.String(), "PG_DSN is not a libpq connection string (it is a JDBC URL, as the seed flow's KAFKA_STATE_JDBC_URL)") ||
				!strings.Contains(out.String(), "Use a URL, postgres://user@host:port/database?sslmode=...") {
				t.Errorf("exit %d, output:\n%s\nwant exit 2 saying PG_DSN is a JDBC URL", code, out.String())
			}
			if strings.Contains(out.String(), secret) || strings.Contains(out.String(), "failed to connect") {
				t.Errorf("the output shows the password or tried to connect:\n%s", out.String())
			}
		})
	}
}

// kafkaTopic creates a compacted topic of its own on the test broker (prefix
// and a random suffix) with the given partitions, deleted when the test ends,
// waits until every partition answers, and returns it with a client that
// produces to the partition each record names (open until the test ends).
func kafkaTopic(t *testing.T, brokers, prefix string, partitions int32) (*kgo.Client, string) {
	t.Helper()
	topic := prefix + testenv.RandomHex(4)
	kcl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the topic is deleted while the client is open.
	t.Cleanup(kcl.Close)
	testenv.CreateTopic(t, kadm.NewClient(kcl), topic, partitions, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")})
	return kcl, topic
}

// pgDatabase creates a database of its own on the test PostgreSQL server
// (prefix and a random suffix; dropped when the test ends) through adminDSN,
// and returns its name and a connection to it (open until the test ends).
func pgDatabase(ctx context.Context, t *testing.T, adminDSN, prefix string) (string, *pgx.Conn) {
	t.Helper()
	db := prefix + testenv.RandomHex(4)
	conn, err := pgx.Connect(ctx, testenv.CreateDatabase(t, adminDSN, db, ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return db, conn
}

// TestKafkaStateNoSecretInOutput runs check, setup, materialize (over
// SASL/SCRAM), verify and check again through the command line with a PostgreSQL role whose password
// comes from PGPASSWORD, then failing runs that handle secrets (a wrong
// SCRAM password, a wrong password inside PG_DSN, KAFKA_PROPERTIES that do
// not parse, a refused batch), and asserts that no password appears
// anywhere in stdout, while the runs report what they should.
func TestKafkaStateNoSecretInOutput(t *testing.T) {
	vars := testenv.Lookup(t, "CHANGESINK_TEST_PG", "CHANGESINK_TEST_KAFKA", "CHANGESINK_TEST_KAFKA_SCRAM",
		"CHANGESINK_TEST_KAFKA_SCRAM_USER", "CHANGESINK_TEST_KAFKA_SCRAM_PASSWORD")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	suffix := testenv.RandomHex(4)
	role, db := "ks_role_"+suffix, "ks_secret_"+suffix
	pgSecret := "pg-Secret-" + testenv.RandomHex(6)
	wrongPG := "wrong-PG-" + testenv.RandomHex(6)
	wrongScram := "wrong-Scram-" + testenv.RandomHex(6)
	scramSecret := vars["CHANGESINK_TEST_KAFKA_SCRAM_PASSWORD"]

	testenv.CreateRole(t, vars["CHANGESINK_TEST_PG"], role, pgSecret)
	testenv.CreateDatabase(t, vars["CHANGESINK_TEST_PG"], db, role)

	kcl, topic := kafkaTopic(t, vars["CHANGESINK_TEST_KAFKA"], "ks_secret_", 2)
	if err := kcl.ProduceSync(ctx,
		&kgo.Record{Topic: topic, Partition: 0, Key: []byte("a"), Value: []byte(`{"v":1}`)},
		&kgo.Record{Topic: topic, Partition: 1, Key: []byte("b"), Value: []byte(`{"v":2}`)},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}

	scramProps := func(password string) string {
		return fmt.Sprintf(`{"bootstrap.servers":%q,"security.protocol":"SASL_PLAINTEXT","sasl.mechanism":"SCRAM-SHA-512","sasl.username":%q,"sasl.password":%q}`,
			vars["CHANGESINK_TEST_KAFKA_SCRAM"], vars["CHANGESINK_TEST_KAFKA_SCRAM_USER"], password)
	}
	// PG_DSN names the role but holds no password (PGPASSWORD does), as the seed flow passes it.
	dsn := testenv.WithUser(t, testenv.WithDatabase(t, vars["CHANGESINK_TEST_PG"], db), role)
	t.Setenv(kafkastate.EnvPGDSN, dsn)
	t.Setenv(kafkastate.EnvPGUser, role)
	t.Setenv(kafkastate.EnvPGPassword, pgSecret)
	t.Setenv(kafkastate.EnvTopic, topic)
	t.Setenv(kafkastate.EnvKafkaProperties, scramProps(scramSecret))
	os.Unsetenv(kafkastate.EnvMaxRecords)
	os.Unsetenv(kafkastate.EnvPollSeconds)

	var all bytes.Buffer
	step := func(name string, wantCode int, wantOut string, env map[string]string, args ...string) {
		t.Helper()
		for k, v := range env {
			t.Setenv(k, v)
		}
		var out bytes.Buffer
		code := run(ctx, append([]string{"--work-dir", t.TempDir()}, args...), &out)
		all.Write(out.Bytes())
		if code != wantCode || !strings.Contains(out.String(), wantOut) {
			t.Errorf("%s: exit %d, want %d with %q; output:\n%s", name, code, wantCode, wantOut, out.String())
		}
	}
	step("check before setup", 2, `kafka-state check found problems: 1 found`, nil, "kafka-state", "check")
	step("setup", 0, `"schema":"kafka_state"`, nil, "kafka-state", "setup")
	step("check after setup", 0, `"behind":2`, nil, "kafka-state", "check")
	step("materialize over SCRAM", 0, `"consumed":2`, nil, "kafka-state", "materialize")
	step("check after the run", 0, `"behind":0`, nil, "kafka-state", "check")
	step("verify", 0, `"valid":true`, nil, "kafka-state", "verify")
	step("wrong SCRAM password", 2, `"error_class":"config"`, map[string]string{kafkastate.EnvKafkaProperties: scramProps(wrongScram)}, "kafka-state", "materialize")
	step("KAFKA_PROPERTIES that do not parse", 2, "JSON object",
		map[string]string{kafkastate.EnvKafkaProperties: `{"sasl.password":"` + scramSecret + `",`}, "kafka-state", "materialize")
	step("wrong password in PG_DSN", 2, "Check PG_DSN",
		map[string]string{kafkastate.EnvKafkaProperties: scramProps(scramSecret), kafkastate.EnvPGDSN: testenv.WithPassword(t, dsn, wrongPG)},
		"kafka-state", "materialize")
	// An unescaped '@' in the DSN's password: libpq's rule makes its tail
	// the host, which the connect error printed (and called transient).
	atSecret := "at-Secret-" + testenv.RandomHex(6)
	step("'@' in the DSN's password", 2, "%40",
		map[string]string{kafkastate.EnvPGDSN: strings.Replace(dsn, "//"+role+"@", "//"+role+":"+wrongPG+"@"+atSecret+"@", 1)},
		"kafka-state", "setup")
	step("misspelt topic", 2, "holds no read positions for it",
		map[string]string{kafkastate.EnvPGDSN: dsn, kafkastate.EnvTopic: topic + "_missing"}, "kafka-state", "materialize")
	step("check of a misspelt topic", 2, `"fix":"Check TOPIC`, nil, "kafka-state", "check")
	step("flags override env", 0, `"consumed":0`, map[string]string{kafkastate.EnvTopic: "ignored"}, "kafka-state", "materialize", "--topic", topic, "--max-records", "5")

	for name, secret := range map[string]string{kafkastate.EnvPGPassword: pgSecret, "wrong DSN password": wrongPG, "SCRAM password": scramSecret, "wrong SCRAM password": wrongScram, "tail of a password with '@'": atSecret} {
		if strings.Contains(all.String(), secret) {
			t.Errorf("stdout contains the %s", name)
		}
	}
	if t.Failed() {
		t.Logf("all output:\n%s", all.String())
	}
}

// TestKafkaStateVerifyReportOnly: with REPORT_ONLY=true (what the shipped
// flow sets, so that its If/Fail tasks decide, as in the seed), a record ahead
// of its durable position is logged at ERROR, naming it, and reported as
// valid=false with exit 0; a consistent topic reports valid=true; without the
// setting the same state is refused (exit 1); positions that do not parse are
// refused either way (that is no answer to the seed's question).
func TestKafkaStateVerifyReportOnly(t *testing.T) {
	vars := testenv.Lookup(t, "CHANGESINK_TEST_PG")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, conn := pgDatabase(ctx, t, vars["CHANGESINK_TEST_PG"], "ks_report_")
	cfg := conn.Config()
	t.Setenv(kafkastate.EnvPGDSN, testenv.WithUser(t, testenv.WithDatabase(t, vars["CHANGESINK_TEST_PG"], db), cfg.User))
	t.Setenv(kafkastate.EnvPGUser, cfg.User)
	t.Setenv(kafkastate.EnvPGPassword, cfg.Password)
	t.Setenv(kafkastate.EnvTopic, "orders")
	os.Unsetenv("REPORT_ONLY")
	runCLI := func(env map[string]string, args ...string) (int, string) {
		t.Helper()
		for k, v := range env {
			t.Setenv(k, v)
		}
		var out bytes.Buffer
		code := run(ctx, append([]string{"--work-dir", t.TempDir()}, args...), &out)
		return code, out.String()
	}
	if code, out := runCLI(nil, "kafka-state", "setup"); code != 0 {
		t.Fatalf("setup: exit %d:\n%s", code, out)
	}
	exec := func(q string) {
		t.Helper()
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO kafka_state.positions (topic, cluster_id, topic_id, next_offsets) VALUES ('orders', 'c', 't', '{"0": 5}')`)
	exec(`INSERT INTO kafka_state.records VALUES ('orders', 'k1', '{"v":1}', false, 0, 4)`)

	reportOnly := map[string]string{"REPORT_ONLY": "true"}
	if code, out := runCLI(reportOnly, "kafka-state", "verify"); code != 0 || !strings.Contains(out, `"valid":true`) {
		t.Errorf("consistent, REPORT_ONLY: exit %d, want 0 with valid=true:\n%s", code, out)
	}
	exec(`INSERT INTO kafka_state.records VALUES ('orders', 'k2', '{"v":2}', false, 0, 7)`)
	code, out := runCLI(reportOnly, "kafka-state", "verify")
	if code != 0 || !strings.Contains(out, `::{"outputs":{"topic":"orders","valid":false}}::`) {
		t.Errorf("record ahead, REPORT_ONLY: exit %d, want 0 with valid=false:\n%s", code, out)
	}
	if want := `{"level":"ERROR","message":"kafka-state: topic \"orders\" key \"k2\": a record is ahead of its durable read position: partition 0 offset 7, saved next offset 5`; !strings.Contains(out, want) {
		t.Errorf("record ahead, REPORT_ONLY: no ERROR log line naming the record (%s):\n%s", want, out)
	}
	if strings.Contains(out, "error_class") {
		t.Errorf("record ahead, REPORT_ONLY: the run reported a failure:\n%s", out)
	}
	if code, out := runCLI(map[string]string{"REPORT_ONLY": "false"}, "kafka-state", "verify"); code != 1 || !strings.Contains(out, `"error_class":"refused"`) {
		t.Errorf("record ahead, REPORT_ONLY=false: exit %d, want 1 (refused):\n%s", code, out)
	}
	exec(`UPDATE kafka_state.positions SET next_offsets = '{"0": "five"}'`)
	if code, out := runCLI(reportOnly, "kafka-state", "verify"); code != 1 || !strings.Contains(out, "not an integer") {
		t.Errorf("malformed positions, REPORT_ONLY: exit %d, want 1 (refused):\n%s", code, out)
	}
}

// TestBatchBoundsParseLikeTheSeed: MAX_RECORDS and POLL_SECONDS are
// read by the seed with Python's int(): decimal, surrounding whitespace and
// digit underscores allowed, no base prefixes. kong's int parser uses base 0
// instead, so MAX_RECORDS=0b11 ran a batch of 3 records, 0x10 one of 16, and
// 010 one of 8 where the seed reads 10; " 10" (which the seed reads as 10)
// was refused.
func TestBatchBoundsParseLikeTheSeed(t *testing.T) {
	tests := []struct {
		name, value string
		want        int // 0: a configuration error
	}{
		{"plain", "250", 250},
		{"leading zero is decimal", "010", 10},
		{"surrounding whitespace", " 10\n", 10},
		{"plus sign", "+5", 5},
		{"digit underscores", "1_000", 1000},
		{"hex", "0x10", 0},
		{"binary", "0b11", 0},
		{"octal prefix", "0o7", 0},
		{"exponent", "1e3", 0},
		{"double underscore", "1__000", 0},
		{"trailing underscore", "1000_", 0},
		{"empty", "", 0},
		{"too large for int64", "99999999999999999999", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, env := range []string{kafkastate.EnvMaxRecords, kafkastate.EnvPollSeconds} {
				t.Setenv(kafkastate.EnvTopic, "t") // the required settings
				t.Setenv(kafkastate.EnvKafkaProperties, "{}")
				t.Setenv(kafkastate.EnvPGDSN, "x")
				t.Setenv(kafkastate.EnvMaxRecords, "7")
				t.Setenv(kafkastate.EnvPollSeconds, "7")
				t.Setenv(env, tt.value)
				var cli CLI
				var out bytes.Buffer
				exited := -1
				parser, err := newParser(&cli, &out, &out, func(code int) { exited = code })
				if err != nil {
					t.Fatal(err)
				}
				_, err = parser.Parse([]string{"kafka-state", "materialize"})
				got := cli.KafkaState.Materialize.MaxRecords
				if env == kafkastate.EnvPollSeconds {
					got = cli.KafkaState.Materialize.PollSeconds
				}
				switch {
				case tt.want == 0 && err == nil && exited < 0:
					t.Errorf("%s=%q parsed as %d, want a configuration error", env, tt.value, got)
				case tt.want != 0 && err != nil:
					t.Errorf("%s=%q: %v, want %d", env, tt.value, err, tt.want)
				case tt.want != 0 && int(got) != tt.want:
					t.Errorf("%s=%q parsed as %d, want %d", env, tt.value, got, tt.want)
				}
			}
		})
	}
}

// TestKafkaStateSignalMidBatch: changesink stopped by SIGINT or SIGTERM
// during a large batch (once its COPY runs) exits 3 saying that it was
// stopped, by which signal, and that nothing was committed; about one run
// in three said only "postgresql: copy the batch into the staging table:
// read tcp ...: use of closed network connection", and every stop was
// called SIGTERM. The stop's cause comes from this command's signal
// handling (signal.NotifyContext), so the built binary is what runs.
func TestKafkaStateSignalMidBatch(t *testing.T) {
	vars := testenv.Lookup(t, "CHANGESINK_TEST_PG", "CHANGESINK_TEST_KAFKA")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := testenv.BuildChangesink(t)
	db, conn := pgDatabase(ctx, t, vars["CHANGESINK_TEST_PG"], "ks_signal_")
	// 60,000 records over six partitions: one batch, whose COPY takes long
	// enough to be interrupted.
	kcl, topic := kafkaTopic(t, vars["CHANGESINK_TEST_KAFKA"], "ks_signal_", 6)
	if err := kafkatest.ProduceMany(ctx, kcl, topic, 6, 60000); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		kafkastate.EnvPGDSN:      testenv.WithDatabase(t, vars["CHANGESINK_TEST_PG"], db),
		kafkastate.EnvTopic:      topic,
		kafkastate.EnvMaxRecords: "100000", kafkastate.EnvPollSeconds: "30",
		kafkastate.EnvKafkaProperties: jsonObject(t, map[string]string{"bootstrap.servers": vars["CHANGESINK_TEST_KAFKA"]}),
	}
	if r := runAsFlow(ctx, t, bin, t.TempDir(), env, "kafka-state", "setup"); r.Code != 0 {
		t.Fatalf("setup: exit %d\n%s", r.Code, r.Output())
	}
	// sessions counts the sessions of db that match where.
	sessions := func(where string) int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND `+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor := func(what string, timeout, poll time.Duration, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(timeout); !done(); time.Sleep(poll) {
			if time.Now().After(deadline) {
				t.Fatalf("waited %s for %s", timeout, what)
			}
		}
	}
	for _, sig := range []struct {
		sig  syscall.Signal
		name string // signal.NotifyContext's cause
	}{{syscall.SIGINT, "interrupt signal received"}, {syscall.SIGTERM, "terminated signal received"}} {
		t.Run(sig.sig.String(), func(t *testing.T) {
			// The previous run's backend may hold the topic lock a moment.
			waitFor("the previous run's session to end", 10*time.Second, 20*time.Millisecond, func() bool { return sessions("true") == 0 })
			child := testenv.Start(t, flowCommand(ctx, bin, t.TempDir(), env, "kafka-state", "materialize"))
			waitFor("the batch's COPY", 20*time.Second, 2*time.Millisecond, func() bool {
				return sessions(`state = 'active' AND query ILIKE 'copy%'`) > 0
			})
			got := child.Stop(t, sig.sig)
			out := got.Output()
			if got.Code == 0 {
				t.Fatalf("the run committed before the signal reached it; the test needs a longer batch:\n%.2000s", out)
			}
			if got.Code != 3 || !strings.Contains(out, `"error_class":"transient"`) ||
				!strings.Contains(out, "kafka-state materialize was stopped before its commit ("+sig.name+"): nothing was committed") ||
				!strings.Contains(out, "Re-run: nothing was committed, and the next batch resumes from the saved positions.") {
				t.Errorf("exit %d, output:\n%.3000s\nwant exit 3, transient, saying it was stopped (%s) before its commit", got.Code, out, sig.name)
			}
			if sig.sig == syscall.SIGINT && strings.Contains(out, "SIGTERM") {
				t.Errorf("a SIGINT is called SIGTERM:\n%.3000s", out)
			}
			var positions, records int
			if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM kafka_state.positions), (SELECT count(*) FROM kafka_state.records)`).Scan(&positions, &records); err != nil {
				t.Fatal(err)
			}
			if positions != 0 || records != 0 {
				t.Fatalf("a stopped run committed something: %d positions rows, %d records", positions, records)
			}
		})
	}
}
