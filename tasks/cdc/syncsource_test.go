package cdc

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
)

// TestSyncRefusedLogin: a password the source refuses is a configuration
// error with its hint, in cdc setup as in cdc sync (not an internal error,
// which tells the operator to report a bug), and the password is not in it.
func TestSyncRefusedLogin(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.items"}
	e.exec(`CREATE TABLE items (id bigint PRIMARY KEY)`)
	cfg, env := e.config()
	cfg.Postgres.Password = "not-the-password-3141"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name string
		run  func() error
	}{
		{"setup", func() error { _, err := SetupSync(ctx, cfg, env); return err }},
		{"sync", func() error { _, err := Sync(ctx, cfg, env); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if err == nil {
				t.Fatal("a refused password succeeded")
			}
			if got := outcome.Classify(err); got != outcome.Config {
				t.Errorf("class %v, want config: %v", got, err)
			}
			if Hint(err) == "" {
				t.Errorf("no hint for %v", err)
			}
			if strings.Contains(err.Error(), cfg.Postgres.Password) {
				t.Errorf("the password is in the error: %v", err)
			}
		})
	}
	if got := e.rows(`SELECT slot_name FROM pg_replication_slots WHERE slot_name = '` + e.slot + `'`); len(got) != 0 {
		t.Errorf("a refused login left a slot: %v", got)
	}
}
