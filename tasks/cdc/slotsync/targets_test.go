package slotsync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// TestSyncRefusesMappingOfAnotherDatabase: a mapping whose source.database
// is not the database the source connection reads is refused by setup and
// by sync, naming both, and nothing is created or written (the trigger
// flow's apply refuses a batch from another database the same way).
func TestSyncRefusesMappingOfAnotherDatabase(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.items"}
	e.exec(`CREATE TABLE items (id bigint PRIMARY KEY, qty int NOT NULL)`, `INSERT INTO items VALUES (1, 10)`)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The slot exists first (a setup of a right mapping, into another
	// database): a setup refused before its load drops only a slot it
	// created, and sync is to refuse the mapping, not a missing slot.
	other, _ := testenv.CreateClickHouseDatabase(t, e.chURL, "cdc_sync_")
	right, err := mapping.ParseSet("sync.yaml", fmt.Appendf(nil, "defaults: {target: {database: %s}}\ntables:\n  - source: {schema: public, table: items}\n", other))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Mappings = right
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, yaml string
	}{
		{"listed table", "defaults: {target: {database: %s}}\ntables:\n  - source: {database: shop, schema: public, table: items}\n"},
		{"the defaults' database", "defaults: {source: {database: shop}, target: {database: %s}}\ntables:\n  - source: {schema: public, table: items}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, err := mapping.ParseSet("sync.yaml", fmt.Appendf(nil, tc.yaml, e.chDB))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Mappings = set
			for _, run := range []struct {
				name string
				fn   func() error
			}{
				{"setup", func() error { _, err := SetupSync(ctx, cfg, env); return err }},
				{"sync", func() error { _, err := Sync(ctx, cfg, env); return err }},
			} {
				err := run.fn()
				if outcome.Classify(err) != outcome.Config || !errors.Is(err, change.ErrConfig) {
					t.Errorf("%s: %v (class %v), want a configuration error", run.name, err, outcome.Classify(err))
					continue
				}
				for _, want := range []string{"public.items", "shop", e.slot} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: %q does not name %s", run.name, err, want)
					}
				}
			}
		})
	}
	if got := e.ch.query(`SELECT name FROM system.tables WHERE database = '` + e.chDB + `'`); len(got) != 0 {
		t.Errorf("a refused mapping created %v", got)
	}
}

// TestSyncRefusesACluster: cdc sync (and its setup) refuses a mapping
// that puts a table on a cluster when it validates its settings, before
// it reaches either server (its sync ledger and load are one server's),
// naming where the file says so.
func TestSyncRefusesACluster(t *testing.T) {
	tests := []struct {
		name, yaml, says string
	}{
		{"defaults, an entry without target", "defaults: {target: {database: analytics, cluster: c1}}\ntables:\n  - source: {schema: public, table: acc}\n", "public.acc"},
		{"defaults, an entry with a target", "defaults: {target: {cluster: c1}}\ntables:\n  - source: {schema: public, table: acc}\n    target: {table: a}\n", "public.acc"},
		{"an entry's own", "tables:\n  - source: {schema: public, table: one}\n  - source: {schema: public, table: acc}\n    target: {cluster: c1}\n", "public.acc"},
		{"defaults alone", "defaults: {target: {cluster: c1}}\n", "defaults"},
		{"none", "tables:\n  - source: {schema: public, table: acc}\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := mapping.ParseSet("sync.yaml", []byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{Postgres: Postgres{DSN: "postgres://u@127.0.0.1:1/db"}, ClickHouse: target.ClickHouse{URL: "clickhouse://127.0.0.1:1/default"}, Mappings: set}
			err = cfg.Validate()
			if tt.says == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			wantError(t, err, outcome.Config, change.ErrConfig, tt.says+`: target.cluster is "c1"`, "cdc sync does not write targets on a cluster", "nothing was created")
		})
	}
}
