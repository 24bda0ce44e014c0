package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestCDCHelp: each cdc command lists the settings it reads and no other
// (cdc sync streams what the publication publishes: CDC_TABLES is setup's).
func TestCDCHelp(t *testing.T) {
	tests := []struct {
		cmd       string
		want, not []string
	}{
		{"setup", []string{"$CDC_TABLES", "--tables", "$CDC_POSTGRES_DSN", "$CDC_MAPPING", "$CDC_LOAD_WORKERS"}, []string{"$CDC_MAX_DURATION"}},
		{"sync", []string{"$CDC_POSTGRES_DSN", "$CDC_SLOT", "$CDC_PUBLICATION", "$CDC_MAPPING", "$CDC_MAX_DURATION"},
			[]string{"$CDC_TABLES", "--tables", "$CDC_LOAD_WORKERS"}},
		{"apply", []string{"$CDC_MAPPING", "$CDC_BATCH_FILE"}, []string{"$CDC_TABLES", "$CDC_POSTGRES_DSN"}},
		{"check", []string{"$CDC_TABLES", "$CDC_POSTGRES_DSN", "$CDC_SLOT", "$CDC_PUBLICATION", "$CDC_MAPPING", "$CLICKHOUSE_URL"},
			[]string{"$CDC_MAX_DURATION", "$CDC_LOAD_WORKERS", "$CDC_BATCH_FILE"}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			var out bytes.Buffer
			if code := run(context.Background(), []string{"cdc", tt.cmd, "--help"}, &out); code != 0 {
				t.Fatalf("exit %d: %s", code, out.String())
			}
			help := strings.Join(strings.Fields(out.String()), " ") // kong wraps lines
			for _, w := range tt.want {
				if !strings.Contains(help, w) {
					t.Errorf("help lacks %q:\n%s", w, out.String())
				}
			}
			for _, n := range tt.not {
				if strings.Contains(help, n) {
					t.Errorf("help lists %q, which the command does not read:\n%s", n, out.String())
				}
			}
		})
	}
}
