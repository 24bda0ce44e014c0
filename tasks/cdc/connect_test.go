package cdc

// Tests of ClickHouse connections that cannot work: wrong TLS, a CA file, an
// invalid port, a run stopped while connecting.

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/target"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// TestTLSMismatchIsConfig: secure=true against a plaintext port, or
// a certificate the client does not trust, failed as an internal error
// (exit 4, "please report it"). A TLS handshake that cannot succeed is a
// configuration error (exit 2) that says what to check.
//
//changesink:per-server
func TestTLSMismatchIsConfig(t *testing.T) {
	e := newEnv(t, ordersMapping)
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	plain := *u
	q := plain.Query()
	q.Set("secure", "true")
	plain.RawQuery = q.Encode()
	untrusted := plain
	untrusted.Host = testenv.ServeUntrustedTLS(t)
	for name, dsn := range map[string]string{"plaintext server": plain.String(), "untrusted certificate": untrusted.String()} {
		t.Run(name, func(t *testing.T) {
			cfg := e.config("")
			cfg.ClickHouse.URL = dsn
			cfg.ClickHouse.Timeout = 10 * time.Second
			_, err := testSetup(context.Background(), cfg)
			if err == nil {
				t.Fatal("Setup succeeded")
			}
			checkError(t, err, outcome.Config, nil, "secure")
			t.Log(err)
		})
	}
}

// TestPlaintextOnTLSPortIsConfig: a CLICKHOUSE_URL without secure=true
// that names a TLS port (ClickHouse's tcp_port_secure) failed as transient
// (exit 3: the server resets the plaintext hello), so a Kestra retry
// retried it for ever. It is a configuration error naming the address and
// secure=true, for setup and apply; a plaintext port that resets or closes
// the connection (a server restarting, a proxy dropping it) stays
// transient.
func TestPlaintextOnTLSPortIsConfig(t *testing.T) {
	testenv.ClickHouseHas(t, testenv.ClickHouseTLS)
	testenv.ClickHouseHas(t, testenv.ClickHouseUsers)
	vars := testenv.Lookup(t, "CHANGESINK_TEST_CLICKHOUSE_SECURE", "CHANGESINK_TEST_CLICKHOUSE_USER", "CHANGESINK_TEST_CLICKHOUSE_PASSWORD")
	e := newEnv(t, ordersMapping)
	secure, err := url.Parse(vars["CHANGESINK_TEST_CLICKHOUSE_SECURE"])
	if err != nil {
		t.Fatal(err)
	}
	plaintext := func(host string) string {
		u := *secure
		u.Host = host
		q := u.Query()
		q.Del("secure")
		u.RawQuery = q.Encode()
		return u.String()
	}
	plain, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	resets := testenv.StartProxy(t, plain.Host, testenv.ProxyOptions{Conn: dropAfterHello(true)})
	closes := testenv.StartProxy(t, plain.Host, testenv.ProxyOptions{Conn: dropAfterHello(false)})
	goTLS := testenv.ServeUntrustedTLS(t)
	alerts := testenv.ServeTLSAlerts(t)
	path := writeFile(t, "changes.ion", encode(t, false, orderEvent(1, int64(1), int64(1), "new", int64(100), false)))
	tests := []struct {
		name string
		host string
		kind outcome.Kind
		says []string
	}{
		{"ClickHouse's TLS port", secure.Host, outcome.Config, []string{secure.Host, "speaks TLS", "add secure=true to CLICKHOUSE_URL", "CLICKHOUSE_CA_FILE"}},
		{"a TLS listener", goTLS, outcome.Config, []string{goTLS, "speaks TLS", "add secure=true to CLICKHOUSE_URL"}},
		{"a TLS listener that answers with an alert", alerts, outcome.Config, []string{alerts, "speaks TLS", "add secure=true to CLICKHOUSE_URL"}},
		{"a plaintext port that resets", resets.Addr(), outcome.Transient, []string{resets.Addr(), "a retry of the run converges"}},
		{"a plaintext port that closes", closes.Addr(), outcome.Transient, []string{closes.Addr(), "EOF"}},
	}
	for _, tt := range tests {
		for cmd, run := range map[string]func(context.Context, testRun) error{
			"setup": func(ctx context.Context, cfg testRun) error { _, err := testSetup(ctx, cfg); return err },
			"apply": func(ctx context.Context, cfg testRun) error { _, err := testApply(ctx, cfg); return err },
		} {
			t.Run(tt.name+"/"+cmd, func(t *testing.T) {
				cfg := e.config(path)
				cfg.ClickHouse.URL = plaintext(tt.host)
				cfg.ClickHouse.Username = vars["CHANGESINK_TEST_CLICKHOUSE_USER"]
				cfg.ClickHouse.Password = vars["CHANGESINK_TEST_CLICKHOUSE_PASSWORD"]
				cfg.ClickHouse.Timeout = 30 * time.Second
				err := run(context.Background(), cfg)
				var is error
				if tt.kind == outcome.Config {
					is = change.ErrConfig
				}
				wantError(t, err, tt.kind, is, tt.says...)
				if strings.Contains(err.Error(), cfg.ClickHouse.Password) {
					t.Errorf("the error shows the password: %v", err)
				}
				noOutputs(t, cfg)
				t.Log(err)
			})
		}
	}
}

// dropAfterHello is a proxy connection that reads the client's first bytes
// (the native hello, or a TLS client hello: one write each) and drops the
// connection without an answer, with a reset (reset) or a close (the
// client reads EOF: nothing it sent is left unread).
func dropAfterHello(reset bool) func(p *testenv.Proxy, client, server net.Conn) {
	return func(_ *testenv.Proxy, client, server net.Conn) {
		defer server.Close()
		_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = client.Read(make([]byte, 64<<10))
		if tc, ok := client.(*net.TCPConn); ok && reset {
			_ = tc.SetLinger(0) // the close sends RST
		}
		client.Close()
	}
}

// TestStopWhileConnecting: a run stopped (SIGTERM cancels the
// context) while clickhouse-go waits for a server's handshake kept waiting
// for the driver's dial timeout (30 s) instead of returning; Kestra kills a
// task that does not stop within its grace period. It must return promptly,
// as a transient failure.
func TestStopWhileConnecting(t *testing.T) {
	e := newEnv(t, ordersMapping)
	ended := make(chan struct{})
	t.Cleanup(func() { close(ended) })
	silent := "clickhouse://" + testenv.ServeLocal(t, func(c net.Conn) { // accepts and never answers
		<-ended
		c.Close()
	}) + "/default"
	path := writeFile(t, "changes.ion", encode(t, false, orderEvent(1, int64(1), int64(1), "new", int64(100), false)))
	for name, run := range map[string]func(context.Context, testRun) error{
		"setup": func(ctx context.Context, cfg testRun) error { _, err := testSetup(ctx, cfg); return err },
		"apply": func(ctx context.Context, cfg testRun) error { _, err := testApply(ctx, cfg); return err },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := e.config(path)
			cfg.ClickHouse.URL = silent
			cfg.ClickHouse.Timeout = time.Minute
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(300*time.Millisecond, cancel)
			start := time.Now()
			err := run(ctx, cfg)
			el := time.Since(start)
			if err == nil {
				t.Fatal("succeeded against a silent server")
			}
			if el > 5*time.Second {
				t.Errorf("returned %v after the stop (%v)", el, err)
			}
			checkError(t, err, outcome.Transient, nil)
			noOutputs(t, cfg)
		})
	}
}

// TestInvalidPortIsConfig: a CLICKHOUSE_URL port outside 1..65535
// can never connect; it was reported as transient (exit 3).
func TestInvalidPortIsConfig(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	_, err := Setup(context.Background(), Config{Mapping: m, ClickHouse: target.ClickHouse{URL: "clickhouse://127.0.0.1:99999/default", Timeout: 5 * time.Second}}, Env{})
	checkError(t, err, outcome.Config, nil)
}

// TestURLNotADSN: a CLICKHOUSE_URL clickhouse-go cannot parse, such as the
// seed's JDBC URL, is a configuration error that shows the form to use and
// never the URL itself (it may hold a password).
func TestURLNotADSN(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	for _, tc := range []struct{ name, url, says string }{
		{"the seed's JDBC URL", "jdbc:clickhouse://ch.example:8123/default?password=s3cret-pw", "it is a JDBC URL, as the seed flow's"},
		{"no address", "clickhouse:///default?password=s3cret-pw", "parse dsn address failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Setup(context.Background(), Config{Mapping: m, ClickHouse: target.ClickHouse{URL: tc.url, Timeout: 5 * time.Second}}, Env{})
			wantError(t, err, outcome.Config, target.ErrBadURL, tc.says, "native protocol: clickhouse://host:9000/database")
			if strings.Contains(err.Error(), "s3cret-pw") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

// TestNothingListeningIsTransient: a CLICKHOUSE_URL port where nothing
// listens (a server down or restarting) is transient, and says that a retry
// converges.
func TestNothingListeningIsTransient(t *testing.T) {
	addr := testenv.ClosedAddr(t)
	m := loadMapping(t, ordersMapping)
	_, err := Setup(context.Background(), Config{Mapping: m, ClickHouse: target.ClickHouse{URL: "clickhouse://" + addr + "/default", Timeout: 5 * time.Second}}, Env{})
	wantError(t, err, outcome.Transient, target.ErrUnreachable, addr, "ClickHouse was unreachable, too slow or dropped the connection",
		"a retry of the run converges")
}

// TestClickHouseCAFile: secure=true on the server's TLS port with the CA
// from CLICKHOUSE_CA_FILE and a user with a password, as a flow logs in;
// then the CA settings that cannot work are configuration errors naming
// what to fix, before or at the handshake.
func TestClickHouseCAFile(t *testing.T) {
	testenv.ClickHouseHas(t, testenv.ClickHouseTLS)
	testenv.ClickHouseHas(t, testenv.ClickHouseUsers)
	vars := testenv.Lookup(t, "CHANGESINK_TEST_CLICKHOUSE_SECURE", "CHANGESINK_TEST_CLICKHOUSE_USER",
		"CHANGESINK_TEST_CLICKHOUSE_PASSWORD", "CHANGESINK_TEST_TLS_CA", "CHANGESINK_TEST_TLS_OTHER_CA")
	tlsURL, err := url.Parse(vars["CHANGESINK_TEST_CLICKHOUSE_SECURE"])
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, ordersMapping)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	testenv.WriteFile(t, notPEM, []byte("not a certificate"), 0o600)
	secure := func(caFile string) testRun {
		cfg := e.config("")
		cfg.ClickHouse = target.ClickHouse{URL: vars["CHANGESINK_TEST_CLICKHOUSE_SECURE"], CAFile: caFile, Timeout: 30 * time.Second,
			Username: vars["CHANGESINK_TEST_CLICKHOUSE_USER"], Password: vars["CHANGESINK_TEST_CLICKHOUSE_PASSWORD"]}
		return cfg
	}
	if _, err := testSetup(context.Background(), secure(vars["CHANGESINK_TEST_TLS_CA"])); err != nil {
		t.Fatalf("setup over TLS with CLICKHOUSE_CA_FILE: %v", err)
	}
	plain := secure(vars["CHANGESINK_TEST_TLS_CA"])
	plain.ClickHouse.URL = e.url
	for name, tt := range map[string]struct {
		cfg  testRun
		want []string
	}{
		"another CA":   {secure(vars["CHANGESINK_TEST_TLS_OTHER_CA"]), []string{tlsURL.Host, "unknown authority", "CLICKHOUSE_CA_FILE"}},
		"no such file": {secure(filepath.Join(t.TempDir(), "nope.pem")), []string{"CLICKHOUSE_CA_FILE", "nope.pem"}},
		"not PEM":      {secure(notPEM), []string{"CLICKHOUSE_CA_FILE", "no PEM certificate"}},
		"without TLS":  {plain, []string{"CLICKHOUSE_CA_FILE", "secure=true"}},
		"wrong password": {func() testRun {
			c := secure(vars["CHANGESINK_TEST_TLS_CA"])
			c.ClickHouse.Password += "-wrong"
			return c
		}(),
			[]string{tlsURL.Host, "CLICKHOUSE_PASSWORD"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := testSetup(context.Background(), tt.cfg)
			wantError(t, err, outcome.Config, nil)
			checkError(t, err, outcome.Config, nil, tt.want...) // and go on to the password
			if strings.Contains(err.Error(), vars["CHANGESINK_TEST_CLICKHOUSE_PASSWORD"]) {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}

// TestStopSaysWhatToDo: a run stopped (SIGTERM, Kestra's timeout: the
// context is cancelled) reported only "context canceled" or "read …:
// context canceled": no word that the run was stopped, what it had
// written, or that a re-run converges. The message now says it was
// stopped, at which step, what the target holds, and to re-run.
//
//changesink:per-server
func TestStopSaysWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		at, want string
	}{
		{"lock held by another run", "stopped (a stop signal, SIGTERM or SIGINT, or the task's timeout) while waiting for the target's lock; nothing was written"},
		{"locked", "stopped (a stop signal, SIGTERM or SIGINT, or the task's timeout) while reading the target; nothing was written"},
		{"before the insert", "stopped (a stop signal, SIGTERM or SIGINT, or the task's timeout) while inserting the batch; nothing was written"},
		{"after the insert", "stopped (a stop signal, SIGTERM or SIGINT, or the task's timeout) while verifying the batch; the target holds none or all of the batch's rows"},
	} {
		t.Run(tc.at, func(t *testing.T) {
			e := newEnv(t, ordersMapping)
			e.setup()
			path := writeFile(t, "changes.ion", encode(t, false, orderEvent(1, int64(1), int64(1), "new", int64(100), false)))
			cfg := e.config(path)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stop := func(context.Context) error { cancel(); return nil }
			switch tc.at {
			case "lock held by another run":
				// A fresh lock of another holder: the run waits for it.
				lock := mapping.Qualified(e.db, mapping.LockName(e.m))
				if err := e.conn.Exec(context.Background(), "CREATE TABLE "+lock+" ENGINE = Memory AS "+
					"SELECT '0123456789abcdef' AS holder, 'elsewhere' AS host, toUInt32(7) AS pid, now() AS beat"); err != nil {
					t.Fatal(err)
				}
				// Stopped once the run says it waits (a fixed delay raced
				// a run slow to connect on a loaded machine).
				cfg.Log = slog.New(onMessage{"waiting up to", func() { time.AfterFunc(200*time.Millisecond, cancel) }})
			default:
				setHook(t, &cfg, tc.at, stop)
			}
			_, err := testApply(ctx, cfg)
			if err == nil {
				t.Fatal("a stopped run succeeded")
			}
			checkError(t, err, outcome.Transient, context.Canceled, tc.want, "re-run")
			noOutputs(t, cfg)
			if tc.at == "lock held by another run" { // that run ends
				if err := e.conn.Exec(context.Background(), "DROP TABLE "+mapping.Qualified(e.db, mapping.LockName(e.m))); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := testApply(context.Background(), e.config(path)); err != nil {
				t.Fatalf("re-run: %v", err)
			}
		})
	}
}

// TestURLSettingsAreConfig: a setting in CLICKHOUSE_URL's query string
// that the server does not know, or whose value it cannot take, is a
// configuration error naming the setting (it was internal, exit 4, from
// the first query: on 18.16 before any query could carry it, on 26.9 from
// the server's parse error, code 27), and setup creates nothing. A value
// only 18.16 refuses is taken by a current server.
//
//changesink:per-server
func TestURLSettingsAreConfig(t *testing.T) {
	for _, tt := range []struct {
		setting, value string
		before19Only   bool // refused only by servers before 19.x
	}{
		{"no_such_setting", "97531", false},
		{"max_block_size", "abc", false},   // a text value: 18.16 takes numbers and booleans only; 26.9 cannot parse it
		{"max_threads", "-97531", false},   // below 0 for an unsigned setting
		{"max_execution_time", "-5", true}, // below 0: 18.16 reads settings as unsigned; 26.9 takes it
	} {
		t.Run(tt.setting, func(t *testing.T) {
			e := newEnv(t, ordersMapping)
			cfg := e.config("")
			cfg.ClickHouse.URL = withSetting(t, cfg.ClickHouse.URL, tt.setting, tt.value)
			_, err := testSetup(context.Background(), cfg)
			if tt.before19Only && e.atLeast(19, 1) {
				if err != nil {
					t.Fatalf("ClickHouse %s takes %s=%s; setup: %v", e.version(), tt.setting, tt.value, err)
				}
				return
			}
			wantError(t, err, outcome.Config, nil, tt.setting, "CLICKHOUSE_URL")
			if strings.Contains(err.Error(), tt.value) {
				t.Errorf("the error shows the value: %v", err)
			}
			if got := e.query("SELECT count() FROM system.tables WHERE database = ?", e.db); len(got) != 1 || got[0] != "0" {
				t.Errorf("setup left tables: %v", got)
			}
		})
	}
}

// TestMemoryLimitSaysWhere: a max_memory_usage in CLICKHOUSE_URL too low for
// any statement fails every run with code 241, which is transient (another
// query's memory is the usual cause); the message says where the limit is
// set, so that a run that keeps failing is fixed, not retried for ever.
// (Apply, not Setup: on 18.16 a CREATE TABLE that fails so leaves its
// directory behind, and the database cannot be dropped.)
//
//changesink:per-server
func TestMemoryLimitSaysWhere(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	cfg := e.config(writeFile(t, "changes.ion", encode(t, false, orderEvent(1, int64(1), int64(1), "new", int64(100), false))))
	cfg.ClickHouse.URL = withSetting(t, cfg.ClickHouse.URL, "max_memory_usage", "1000")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := testApply(ctx, cfg)
	wantError(t, err, outcome.Transient, target.ErrMemory, "code: 241", "for query: max_memory_usage", "CLICKHOUSE_URL's query string")
	// The server's words for the limit: 18.16 "Memory limit (for query) exceeded", 26.9 "Query memory limit exceeded".
	if !strings.Contains(err.Error(), "Memory limit (for query) exceeded") && !strings.Contains(err.Error(), "Query memory limit exceeded") {
		t.Errorf("the error does not say the query's limit was exceeded: %v", err)
	}
}

// withSetting returns the ClickHouse URL raw with the query setting name
// set to value (a setting it had is replaced).
func withSetting(t *testing.T, raw, name, value string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// onMessage is a slog handler that calls do at each record
// whose message contains sub.
type onMessage struct {
	sub string
	do  func()
}

func (h onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h onMessage) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h onMessage) WithGroup(string) slog.Handler            { return h }
func (h onMessage) Handle(_ context.Context, r slog.Record) error {
	if h.do != nil && strings.Contains(r.Message, h.sub) {
		h.do()
	}
	return nil
}
