package cdc

import (
	"testing"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/target"

	"github.com/changesink/changesink/internal/outcome"
)

// TestConfigValidate: settings no run can succeed with are configuration
// errors before any connection. A ClickHouse timeout under a second failed
// every call as transient ("a retry of the run converges"), which no retry
// does.
func TestConfigValidate(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	ok := Config{Mapping: m, ClickHouse: target.ClickHouse{URL: "clickhouse://127.0.0.1:9000/default"}, BatchFile: "changes.ion"}
	for _, tt := range []struct {
		name string
		edit func(*Config)
		want string // "" when valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"one second", func(c *Config) { c.ClickHouse.Timeout = time.Second }, ""},
		{"negative timeout", func(c *Config) { c.ClickHouse.Timeout = -time.Second }, "negative ClickHouse timeout"},
		{"a millisecond", func(c *Config) { c.ClickHouse.Timeout = time.Millisecond }, "CDC_CLICKHOUSE_TIMEOUT 1ms is under 1s"},
		{"65 workers", func(c *Config) { c.Workers = 65 }, "CDC_WORKERS 65 outside 0..64"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.Validate()
			if err == nil {
				err = c.checkBatchFile()
			}
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantError(t, err, outcome.Config, change.ErrConfig, tt.want)
		})
	}
}
