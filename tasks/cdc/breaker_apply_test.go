package cdc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// TestBreakerSetupExistingTableMissingColumn: setup against an existing
// table that lacks a mapped column (or a view where the table should be)
// ran CREATE VIEW before checking the table, and ClickHouse's "Unknown
// identifier" came out as an internal error (exit 4). It must be the
// schema check's ErrTargetMismatch naming the column (exit 2), and create
// no view.
func TestBreakerSetupExistingTableMissingColumn(t *testing.T) {
	for name, ddl := range map[string]string{
		"missing column": "CREATE TABLE %s.orders_cdc (id Int64, customer_id Int64, amount_cents Int64, _cdc_lsn UInt64, _cdc_deleted UInt8) " +
			"ENGINE = ReplacingMergeTree(_cdc_lsn) ORDER BY id",
		"a view": "CREATE VIEW %s.orders_cdc AS SELECT 1 AS id",
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, ordersMapping)
			if err := e.conn.Exec(context.Background(), strings.ReplaceAll(ddl, "%s", e.db)); err != nil {
				t.Fatal(err)
			}
			_, err := Setup(context.Background(), e.config(""))
			if !errors.Is(err, ErrTargetMismatch) || outcome.Classify(err) != outcome.Config {
				t.Fatalf("err = %v (class %v), want a config ErrTargetMismatch", err, outcome.Classify(err))
			}
			if name == "missing column" && !strings.Contains(err.Error(), `"status"`) {
				t.Errorf("error does not name the missing column: %v", err)
			}
			if got := e.query("SELECT count() FROM system.tables WHERE database = ? AND name = 'orders_live'", e.db); got[0] != "0" {
				t.Errorf("the live view was created over a mismatched table")
			}
		})
	}
}

// TestBreakerTLSMismatchIsConfig: secure=true against a plaintext port, or
// a certificate the client does not trust, failed as an internal error
// (exit 4, "please report it"). A TLS handshake that cannot succeed is a
// configuration error (exit 2) that says what to check.
func TestBreakerTLSMismatchIsConfig(t *testing.T) {
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
	untrusted.Host = tlsServer(t)
	for name, dsn := range map[string]string{"plaintext server": plain.String(), "untrusted certificate": untrusted.String()} {
		t.Run(name, func(t *testing.T) {
			cfg := e.config("")
			cfg.ClickHouse.URL = dsn
			cfg.ClickHouse.Timeout = 10 * time.Second
			_, err := Setup(context.Background(), cfg)
			if err == nil {
				t.Fatal("Setup succeeded")
			}
			if k := outcome.Classify(err); k != outcome.Config {
				t.Errorf("class %v, want config: %v", k, err)
			}
			if !strings.Contains(err.Error(), "secure") {
				t.Errorf("error does not point at the secure setting: %v", err)
			}
			t.Log(err)
		})
	}
}

// tlsServer listens with a self-signed certificate and completes TLS
// handshakes only (the client refuses the certificate before any
// ClickHouse bytes); it returns its address.
func tlsServer(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				_ = c.(*tls.Conn).Handshake()
			}()
		}
	}()
	return ln.Addr().String()
}

// TestBreakerStopWhileConnecting: a run stopped (SIGTERM cancels the
// context) while clickhouse-go waits for a server's handshake kept waiting
// for the driver's dial timeout (30 s) instead of returning; Kestra kills a
// task that does not stop within its grace period. It must return promptly,
// as a transient failure.
func TestBreakerStopWhileConnecting(t *testing.T) {
	e := newEnv(t, ordersMapping)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() { // accepts and never answers
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	silent := "clickhouse://" + ln.Addr().String() + "/default"
	path := writeFile(t, "changes.ion", encode(t, false, orderEvent(1, int64(1), int64(1), "new", int64(100), false)))
	for name, run := range map[string]func(context.Context, Config) error{
		"setup": func(ctx context.Context, cfg Config) error { _, err := Setup(ctx, cfg); return err },
		"apply": func(ctx context.Context, cfg Config) error { _, err := Apply(ctx, cfg); return err },
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
			if k := outcome.Classify(err); k != outcome.Transient {
				t.Errorf("class %v, want transient: %v", k, err)
			}
			noOutputs(t, cfg)
		})
	}
}

// TestBreakerBatchFileIsADirectory: CDC_BATCH_FILE naming a directory was
// reported as transient (exit 3: "retry"), because outcome.Classify calls
// every errno a network error. No retry helps: it is a configuration error.
func TestBreakerBatchFileIsADirectory(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	dir := filepath.Join(t.TempDir(), "changes.ion")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Apply(context.Background(), Config{Mapping: m, ClickHouse: ClickHouse{URL: "clickhouse://127.0.0.1:1/default"}, BatchFile: dir})
	if err == nil {
		t.Fatal("Apply succeeded")
	}
	if k := outcome.Classify(err); k != outcome.Config || !errors.Is(err, ErrConfig) {
		t.Errorf("class %v, want a config ErrConfig: %v", k, err)
	}
}

// TestBreakerInvalidPortIsConfig: a CLICKHOUSE_URL port outside 1..65535
// can never connect; it was reported as transient (exit 3).
func TestBreakerInvalidPortIsConfig(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	_, err := Setup(context.Background(), Config{Mapping: m, ClickHouse: ClickHouse{URL: "clickhouse://127.0.0.1:99999/default", Timeout: 5 * time.Second}})
	if k := outcome.Classify(err); k != outcome.Config {
		t.Errorf("class %v, want config: %v", k, err)
	}
}

// TestBreakerSetupDecimal256: a Decimal with more than 38 digits is
// Decimal256, which ClickHouse accepts from 21.6 (20.8 behind a setting);
// on 18.16 setup failed with the server's "Wrong precision" as an internal
// error (exit 4). Like DateTime64 it is ErrUnsupportedServer (exit 2).
func TestBreakerSetupDecimal256(t *testing.T) {
	if !capsFor(21, 6).decimal256 || capsFor(21, 5).decimal256 || !latestCaps().decimal256 {
		t.Errorf("Decimal256 capability: 21.5 %v, 21.6 %v, current %v", capsFor(21, 5).decimal256, capsFor(21, 6).decimal256, latestCaps().decimal256)
	}
	e := newEnv(t, ordersMapping)
	m, err := ParseMapping("wide.yaml", []byte("source: {database: shop, schema: public, table: t}\n"+
		"target: {database: "+e.db+", table: wide}\nkey: [id]\n"+
		"columns: [{name: id, type: Int64}, {name: amount, type: \"Decimal(76, 2)\"}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	caps := e.caps()
	_, err = Setup(context.Background(), e.config(""))
	if caps.decimal256 {
		if err != nil {
			t.Fatalf("Setup on a server with Decimal256: %v", err)
		}
		return
	}
	if !errors.Is(err, ErrUnsupportedServer) || outcome.Classify(err) != outcome.Config || !strings.Contains(err.Error(), `column "amount"`) {
		t.Fatalf("err = %v (class %v), want a config ErrUnsupportedServer naming the column", err, outcome.Classify(err))
	}
}

// TestBreakerSetupStaleLiveView: after a column is added (to the mapping and
// the table, as the runbook says for "source columns changed"), setup kept
// the old live view (CREATE VIEW IF NOT EXISTS) and reported it "in place"
// without the new column; a table squatting the view's name passed too.
// Setup checks that the live view is a view over the mapping's columns.
func TestBreakerSetupStaleLiveView(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	if err := e.conn.Exec(context.Background(), "ALTER TABLE "+e.db+".orders_cdc ADD COLUMN note Nullable(String) AFTER status"); err != nil {
		t.Fatal(err)
	}
	wider, err := ParseMapping("wider.yaml", []byte("source: {database: shop, schema: public, table: orders}\n"+
		"target: {database: "+e.db+", table: orders_cdc, live_view: orders_live}\nkey: [id]\ncolumns:\n"+
		"  - {name: id, type: Int64}\n  - {name: customer_id, type: Int64}\n  - {name: amount_cents, type: Int64}\n"+
		"  - {name: status, type: String, max_length: 32}\n  - {name: note, type: Nullable(String)}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.config("")
	cfg.Mapping = wider
	_, err = Setup(context.Background(), cfg)
	if !errors.Is(err, ErrTargetMismatch) || outcome.Classify(err) != outcome.Config || !strings.Contains(err.Error(), "orders_live") {
		t.Fatalf("err = %v, want a config ErrTargetMismatch naming the view", err)
	}
	t.Log(err)
	// Dropping the view, as the message says, lets setup make the new one.
	if err := e.conn.Exec(context.Background(), "DROP TABLE "+e.db+".orders_live"); err != nil {
		t.Fatal(err)
	}
	if _, err := Setup(context.Background(), cfg); err != nil {
		t.Fatalf("Setup after dropping the view: %v", err)
	}
	if got := e.query("SELECT name FROM system.columns WHERE database = ? AND table = 'orders_live'", e.db); strings.Join(got, ",") != "id,customer_id,amount_cents,status,note" {
		t.Errorf("view columns %v", got)
	}

	// A table where the view should be.
	e2 := newEnv(t, ordersMapping)
	if err := e2.conn.Exec(context.Background(), "CREATE TABLE "+e2.db+".orders_live (id Int64, customer_id Int64, amount_cents Int64, status String) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	_, err = Setup(context.Background(), e2.config(""))
	if !errors.Is(err, ErrTargetMismatch) || !strings.Contains(err.Error(), "orders_live") {
		t.Fatalf("a Memory table as the live view: %v, want ErrTargetMismatch", err)
	}
}

// TestClickHouseCAFile: secure=true on the server's TLS port with the CA
// from CLICKHOUSE_CA_FILE and a user with a password, as a flow logs in;
// then the CA settings that cannot work are configuration errors naming
// what to fix, before or at the handshake.
func TestClickHouseCAFile(t *testing.T) {
	vars := testenv.Lookup(t, "CHANGESINK_TEST_CLICKHOUSE_SECURE", "CHANGESINK_TEST_CLICKHOUSE_USER",
		"CHANGESINK_TEST_CLICKHOUSE_PASSWORD", "CHANGESINK_TEST_TLS_CA", "CHANGESINK_TEST_TLS_OTHER_CA")
	e := newEnv(t, ordersMapping)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	secure := func(caFile string) Config {
		cfg := e.config("")
		cfg.ClickHouse = ClickHouse{URL: vars["CHANGESINK_TEST_CLICKHOUSE_SECURE"], CAFile: caFile, Timeout: 30 * time.Second,
			Username: vars["CHANGESINK_TEST_CLICKHOUSE_USER"], Password: vars["CHANGESINK_TEST_CLICKHOUSE_PASSWORD"]}
		return cfg
	}
	if _, err := Setup(context.Background(), secure(vars["CHANGESINK_TEST_TLS_CA"])); err != nil {
		t.Fatalf("setup over TLS with CLICKHOUSE_CA_FILE: %v", err)
	}
	plain := secure(vars["CHANGESINK_TEST_TLS_CA"])
	plain.ClickHouse.URL = e.url
	for name, tt := range map[string]struct {
		cfg  Config
		want []string
	}{
		"another CA":   {secure(vars["CHANGESINK_TEST_TLS_OTHER_CA"]), []string{"localhost:19440", "unknown authority", "CLICKHOUSE_CA_FILE"}},
		"no such file": {secure(filepath.Join(t.TempDir(), "nope.pem")), []string{"CLICKHOUSE_CA_FILE", "nope.pem"}},
		"not PEM":      {secure(notPEM), []string{"CLICKHOUSE_CA_FILE", "no PEM certificate"}},
		"without TLS":  {plain, []string{"CLICKHOUSE_CA_FILE", "secure=true"}},
		"wrong password": {func() Config {
			c := secure(vars["CHANGESINK_TEST_TLS_CA"])
			c.ClickHouse.Password += "-wrong"
			return c
		}(),
			[]string{"localhost:19440", "CLICKHOUSE_PASSWORD"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Setup(context.Background(), tt.cfg)
			if err == nil || outcome.Classify(err) != outcome.Config {
				t.Fatalf("err = %v (class %v), want a configuration error", err, outcome.Classify(err))
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
			if strings.Contains(err.Error(), vars["CHANGESINK_TEST_CLICKHOUSE_PASSWORD"]) {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}
