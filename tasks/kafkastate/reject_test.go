package kafkastate

import (
	"strings"
	"testing"
)

// TestResultCountsRejected: with ON_BAD_RECORD=reject the outputs and
// metrics carry rejected (0 included) and the summary says it; without
// it, neither does, so refuse mode reports as before.
func TestResultCountsRejected(t *testing.T) {
	tests := []struct {
		name     string
		res      Result
		want     any // the output rejected; nil: absent
		summary  string
		noMetric bool
	}{
		{"refuse", Result{Topic: "t"}, nil, "", true},
		{"reject, none", Result{Topic: "t", Reject: true}, int64(0), ", 0 kept aside in kafka_state.rejected", false},
		{"reject, some", Result{Topic: "t", Reject: true, Rejected: 3}, int64(3), ", 3 kept aside in kafka_state.rejected", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.res.Outputs()["rejected"]
			if (tt.want == nil) == ok || (ok && got != tt.want) {
				t.Errorf("output rejected = %v (%v), want %v", got, ok, tt.want)
			}
			var metric *float64
			for _, m := range tt.res.Metrics() {
				if m.Name == "rejected" {
					if m.Type != "counter" || m.Tags["topic"] != "t" {
						t.Errorf("metric %+v, want a counter tagged with the topic", m)
					}
					metric = &m.Value
				}
			}
			if (metric == nil) != tt.noMetric || (metric != nil && *metric != float64(tt.res.Rejected)) {
				t.Errorf("metric rejected = %v, want %d (none: %v)", metric, tt.res.Rejected, tt.noMetric)
			}
			if s := tt.res.Summary(); tt.summary != "" && !strings.Contains(s, tt.summary) || tt.summary == "" && strings.Contains(s, "kept aside") {
				t.Errorf("summary %q, want %q", s, tt.summary)
			}
		})
	}
}

// TestVerifyResultRejected: verify's outputs name rejected only when the
// topic has rejected records, so the seed's outputs stay as they were.
func TestVerifyResultRejected(t *testing.T) {
	if _, ok := (&VerifyResult{Topic: "t"}).Outputs()["rejected"]; ok {
		t.Error("output rejected without rejected records")
	}
	if got := (&VerifyResult{Topic: "t", Rejected: 2}).Outputs()["rejected"]; got != int64(2) {
		t.Errorf("output rejected = %v, want 2", got)
	}
}
