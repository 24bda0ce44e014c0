package slotsync

import (
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// TestSyncConfigValidate: cdc sync's settings out of their range are
// configuration errors, naming the variable; zeros take the defaults, and
// a table without a target database goes to the URL's.
func TestSyncConfigValidate(t *testing.T) {
	ok := Config{Postgres: Postgres{DSN: "postgres://127.0.0.1/src"}, ClickHouse: target.ClickHouse{URL: "clickhouse://127.0.0.1:9000/read_model"}}
	for _, tt := range []struct {
		name string
		edit func(*Config)
		want string // "" when valid
		db   string // the tables' target database when valid
	}{
		{"defaults", func(*Config) {}, "", "read_model"},
		{"64 load workers", func(c *Config) { c.LoadWorkers = 64 }, "", "read_model"},
		{"database= setting", func(c *Config) { c.ClickHouse.URL = "http://127.0.0.1:8123?database=other" }, "", "other"},
		{"65 load workers", func(c *Config) { c.LoadWorkers = 65 }, "CDC_LOAD_WORKERS 65 outside 0..64", ""},
		{"negative load workers", func(c *Config) { c.LoadWorkers = -1 }, "CDC_LOAD_WORKERS -1 outside 0..64", ""},
		{"negative max changes", func(c *Config) { c.MaxChanges = -1 }, "CDC_MAX_CHANGES -1 is negative", ""},
		{"negative max duration", func(c *Config) { c.MaxDuration = -time.Second }, "CDC_MAX_DURATION -1s is negative", ""},
		{"no source", func(c *Config) { c.Postgres.DSN = "" }, "no source database (CDC_POSTGRES_DSN)", ""},
		{"no target", func(c *Config) { c.ClickHouse.URL = "" }, "no ClickHouse URL (CLICKHOUSE_URL)", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.Validate()
			if tt.want != "" {
				wantError(t, err, outcome.Config, change.ErrConfig, tt.want)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Slot != DefaultSlot || c.Publication != DefaultPublication || c.MaxDuration != DefaultMaxDuration ||
				c.FlushChanges != DefaultFlushChanges || c.LoadWorkers == 0 {
				t.Errorf("defaults not filled in: %+v", c)
			}
			m, err := c.Mappings.For("src", "public", "q", []mapping.Column{{Name: "id", Type: "Int32"}}, []string{"id"})
			if err != nil || m.Target.Database != tt.db {
				t.Errorf("a table's target without a database: %+v, %v; want the URL's %s", m, err, tt.db)
			}
		})
	}
}
