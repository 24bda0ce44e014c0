package cdc

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// TestApplyClickHouseGoesAway stops the server (a proxy in front of it)
// before the insert and before the verify: each run fails with a transient
// error and leaves no output file; a later run converges.
func TestApplyClickHouseGoesAway(t *testing.T) {
	for _, when := range []string{"before the insert", "during the insert", "after the insert"} {
		t.Run(when, func(t *testing.T) {
			e := newEnv(t, ordersMapping)
			e.setup()
			u, err := url.Parse(e.url)
			if err != nil {
				t.Fatal(err)
			}
			p := testenv.StartProxy(t, u.Host, testenv.ProxyOptions{})
			viaProxy := *u
			viaProxy.Host = p.Addr()
			path := writeFile(t, "changes.ion", encode(t, false,
				orderEvent(1, int64(10), int64(500), "new", int64(100), false),
				orderEvent(2, int64(20), int64(700), "new", int64(101), false)))
			cfg := e.config(path)
			cfg.ClickHouse.URL = viaProxy.String()
			stop := func(context.Context) error { p.Close(); return nil }
			switch when {
			case "before the insert":
				cfg.hooks.beforeInsert = stop
			case "during the insert":
				p.CutOn([]byte(insertSQL(e.m))) // the batch's insert, not the lock's or the ledger's
			default:
				cfg.hooks.afterInsert = stop
			}
			res, err := Apply(context.Background(), cfg)
			if err == nil {
				t.Fatalf("Apply succeeded with the server gone: %v", res.Outputs())
			}
			if k := outcome.Classify(err); k != outcome.Transient {
				t.Errorf("class %v, want transient: %v", k, err)
			}
			var re *RecordError
			if errors.As(err, &re) {
				t.Errorf("a lost server reported as a record fault: %v", err)
			}
			t.Logf("error: %v", err)
			noOutputs(t, cfg)
			// Issue 11: the batch is one INSERT block, one part: a cut before
			// or during the insert leaves none of its rows, after it all; the
			// ledger records only a verified batch.
			wantRows := map[string]string{"before the insert": "0", "during the insert": "0", "after the insert": "2"}[when]
			if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc"); n[0] != wantRows {
				t.Errorf("%s rows after a cut %s, want %s", n[0], when, wantRows)
			}
			if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc_ledger WHERE kind = 'batch'"); n[0] != "0" {
				t.Errorf("the cut run wrote %s ledger rows", n[0])
			}

			res, err = Apply(context.Background(), e.config(path))
			if err != nil {
				t.Fatal(err)
			}
			if res.Verified != 2 {
				t.Errorf("re-run outputs %v", res.Outputs())
			}
			if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc_ledger WHERE kind = 'batch'"); n[0] != "1" {
				t.Errorf("%s ledger rows after the re-run, want 1", n[0])
			}
			if got := e.query("SELECT name FROM system.tables WHERE database = ? AND name LIKE 'orders_cdc_lock%'", e.db); len(got) != 0 {
				t.Errorf("lock tables left: %v", got)
			}
		})
	}
}
