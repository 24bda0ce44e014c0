package cdc

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// TestErrorsAlikeOverNativeAndHTTP runs the same failing setups and
// applies against ClickHouse 26.9 over its native protocol and over its
// HTTP interface (http://): each fails with the same class and cause
// either way. Over HTTP clickhouse-go wraps the server's exception in an
// *HTTPError, and CLICKHOUSE_URL's settings travel with its hello query.
func TestErrorsAlikeOverNativeAndHTTP(t *testing.T) {
	vars := testenv.Lookup(t, "CHANGESINK_TEST_CLICKHOUSE_CURRENT", "CHANGESINK_TEST_CLICKHOUSE_CURRENT_HTTP")
	native := vars["CHANGESINK_TEST_CLICKHOUSE_CURRENT"]
	db, nativeDB := testenv.CreateClickHouseDatabase(t, native, "cdc_")
	urls := map[string]string{"native": nativeDB, "http": withPath(t, vars["CHANGESINK_TEST_CLICKHOUSE_CURRENT_HTTP"], db)}
	batch := writeFile(t, "changes.ion", encode(t, false, orderEvent(1, int64(1), int64(1), "new", int64(100), false)))
	setup := func(ctx context.Context, cfg testRun) error { _, err := testSetup(ctx, cfg); return err }
	apply := func(ctx context.Context, cfg testRun) error { _, err := testApply(ctx, cfg); return err }
	for _, tc := range []struct {
		name   string
		run    func(context.Context, testRun) error
		change func(t *testing.T, cfg *testRun)
		kind   outcome.Kind
		is     error
	}{
		{"apply before setup", apply, nil, outcome.Config, change.ErrTargetMismatch},
		{"setup without the database", setup, func(t *testing.T, cfg *testRun) {
			m := *cfg.Mapping
			m.Target.Database = db + "_absent"
			cfg.Mapping = &m
		}, outcome.Config, change.ErrNoDatabase},
		{"a setting the server does not know", setup, func(t *testing.T, cfg *testRun) {
			cfg.ClickHouse.URL = withSetting(t, cfg.ClickHouse.URL, "no_such_setting", "1")
		}, outcome.Config, target.ErrUnknownSetting},
		{"a value the server cannot take", setup, func(t *testing.T, cfg *testRun) {
			cfg.ClickHouse.URL = withSetting(t, cfg.ClickHouse.URL, "max_block_size", "abc")
		}, outcome.Config, change.ErrConfig},
		{"readonly", setup, func(t *testing.T, cfg *testRun) {
			cfg.ClickHouse.URL = withSetting(t, cfg.ClickHouse.URL, "readonly", "1")
		}, outcome.Config, target.ErrNotAllowed},
		{"a wrong password", setup, func(t *testing.T, cfg *testRun) {
			cfg.ClickHouse.Username, cfg.ClickHouse.Password = "default", "not-the-password"
		}, outcome.Config, target.ErrCredentials},
		{"nothing listens", setup, func(t *testing.T, cfg *testRun) {
			u, err := url.Parse(cfg.ClickHouse.URL)
			if err != nil {
				t.Fatal(err)
			}
			u.Host = testenv.ClosedAddr(t)
			cfg.ClickHouse.URL = u.String()
			cfg.ClickHouse.Timeout = 5 * time.Second
		}, outcome.Transient, target.ErrUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, proto := range []string{"native", "http"} {
				m := loadMapping(t, ordersMapping)
				m.Target.Database, m.Target.CreateDatabase = db, false
				cfg := testRun{Config{Mapping: m, ClickHouse: target.ClickHouse{URL: urls[proto], Timeout: time.Minute}, BatchFile: batch},
					Env{Dir: kestra.Dir{Path: t.TempDir()}, hooks: testhook.Hooks{LockTiming: testLockTiming}}}
				if tc.change != nil {
					tc.change(t, &cfg)
				}
				err := tc.run(context.Background(), cfg)
				if !checkError(t, err, tc.kind, tc.is) {
					t.Errorf("over %s (%s)", proto, cfg.ClickHouse.URL)
				}
			}
		})
	}
	// The memory limit, on a target that is set up.
	m := loadMapping(t, ordersMapping)
	m.Target.Database, m.Target.CreateDatabase = db, false
	if _, err := testSetup(context.Background(), testRun{Config{Mapping: m, ClickHouse: target.ClickHouse{URL: nativeDB, Timeout: time.Minute}}, Env{}}); err != nil {
		t.Fatal(err)
	}
	for _, proto := range []string{"native", "http"} {
		cfg := testRun{Config{Mapping: m, ClickHouse: target.ClickHouse{URL: withSetting(t, urls[proto], "max_memory_usage", "1000"), Timeout: time.Minute},
			BatchFile: batch}, Env{Dir: kestra.Dir{Path: t.TempDir()}, hooks: testhook.Hooks{LockTiming: testLockTiming}}}
		_, err := testApply(context.Background(), cfg)
		if !checkError(t, err, outcome.Transient, target.ErrMemory, "code: 241") {
			t.Errorf("memory limit over %s", proto)
		}
	}
}

// withPath returns the URL raw with its path (the database) set to db.
func withPath(t *testing.T, raw, db string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	return u.String()
}
