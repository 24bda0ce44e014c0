package main

import (
	"bytes"
	"testing"

	"github.com/changesink/changesink/tasks/kafkastate"
)

// TestBreakerBatchBoundsParseLikeTheSeed: MAX_RECORDS and POLL_SECONDS are
// read by the seed with Python's int(): decimal, surrounding whitespace and
// digit underscores allowed, no base prefixes. kong's int parser uses base 0
// instead, so MAX_RECORDS=0b11 ran a batch of 3 records, 0x10 one of 16, and
// 010 one of 8 where the seed reads 10; " 10" (which the seed reads as 10)
// was refused.
func TestBreakerBatchBoundsParseLikeTheSeed(t *testing.T) {
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
