package kafkastate

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestRetentionAllowed(t *testing.T) {
	for _, tc := range []struct {
		ms             int64
		margin, allows time.Duration
	}{
		{0, 0, 0},
		{100, 10 * time.Millisecond, 90 * time.Millisecond},
		{10000, time.Second, 9 * time.Second},
		{86400000, 5 * time.Minute, 24*time.Hour - 5*time.Minute}, // the default: the margin is capped
		{math.MaxInt64, 5 * time.Minute, time.Duration(math.MaxInt64) - 5*time.Minute},
	} {
		r := retention{compact: true, deleteRetentionMs: tc.ms}
		if m, a := r.margin(), r.allowed(); m != tc.margin || a != tc.allows {
			t.Errorf("delete.retention.ms=%d: margin %s allowed %s, want %s %s", tc.ms, m, a, tc.margin, tc.allows)
		}
		if w := TombstoneWindow(tc.ms); w != tc.allows {
			t.Errorf("TombstoneWindow(%d) = %s, want %s", tc.ms, w, tc.allows)
		}
	}
}

// TestTombstoneRuleDecisions: which batches the rule refuses, before and
// after the reads, from the times alone.
func TestTombstoneRuleDecisions(t *testing.T) {
	minute := retention{policy: "compact", compact: true, deleteRetentionMs: 60000} // allows 54 s
	p0 := partRange{partition: 0, from: 5, end: 9, reached: 9}
	p1 := partRange{partition: 1, from: 2, end: 2, reached: 3}
	for _, tc := range []struct {
		name          string
		rule          tombstoneRule
		lagging       []partRange
		advanced      []partRange
		lagged        map[int32]bool
		before, after bool // refused
	}{
		{name: "caught up long ago, nothing new", rule: tombstoneRule{ret: minute, hasPositions: true, sinceUpdated: 48 * time.Hour}},
		{name: "lagging within the allowed time", rule: tombstoneRule{ret: minute, hasPositions: true, sinceUpdated: 53 * time.Second},
			lagging: []partRange{p0}, advanced: []partRange{p0}, lagged: map[int32]bool{0: true}},
		{name: "lagging past the allowed time", rule: tombstoneRule{ret: minute, hasPositions: true, sinceUpdated: 55 * time.Second},
			lagging: []partRange{p0}, before: true},
		{name: "first run: nothing stored, only the reads count", rule: tombstoneRule{ret: minute, sinceUpdated: 0},
			lagging: []partRange{p0}, advanced: []partRange{p0}, lagged: map[int32]bool{0: true}},
		{name: "not compacted", rule: tombstoneRule{ret: retention{policy: "delete"}, hasPositions: true, sinceUpdated: 48 * time.Hour},
			lagging: []partRange{p0}, advanced: []partRange{p0}, lagged: map[int32]bool{0: true}},
		{name: "at its end at the start: measured from the start", rule: tombstoneRule{ret: minute, hasPositions: true, sinceUpdated: 50 * time.Second},
			advanced: []partRange{p1}},
		{name: "reads end late for a lagging partition", rule: tombstoneRule{ret: minute, hasPositions: true, sinceUpdated: 50 * time.Second,
			checked: time.Now().Add(-5 * time.Second)}, lagging: []partRange{p0}, advanced: []partRange{p0}, lagged: map[int32]bool{0: true}, after: true},
		{name: "reads of one batch longer than allowed", rule: tombstoneRule{ret: minute, checked: time.Now().Add(-time.Minute)},
			advanced: []partRange{p1}, after: true},
		// An updated_at ahead of PostgreSQL's clock (positions restored from
		// a server whose clock was ahead, edited by hand, or the clock set
		// back) gave a negative elapsed time, which passed every check
		// until that future time: the rule was off.
		{name: "updated_at far in the future, lagging", rule: tombstoneRule{ret: minute, hasPositions: true, sinceUpdated: -48 * time.Hour},
			lagging: []partRange{p0}, before: true},
		{name: "updated_at within the margin ahead (a clock step)", rule: tombstoneRule{ret: minute, hasPositions: true, sinceUpdated: -5 * time.Second},
			lagging: []partRange{p0}, advanced: []partRange{p0}, lagged: map[int32]bool{0: true}},
		{name: "updated_at far in the future, nothing new", rule: tombstoneRule{ret: minute, hasPositions: true, sinceUpdated: -48 * time.Hour}},
		{name: "delete.retention.ms=0: any reads", rule: tombstoneRule{ret: retention{compact: true}, checked: time.Now().Add(-time.Millisecond)},
			advanced: []partRange{p1}, after: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rule.checked.IsZero() {
				tc.rule.checked = time.Now()
			}
			err := tc.rule.beforeRead(tc.lagging)
			if (err != nil) != tc.before {
				t.Fatalf("beforeRead = %v, want refused %v", err, tc.before)
			}
			if err != nil {
				return
			}
			err = tc.rule.afterRead(tc.advanced, tc.lagged)
			if (err != nil) != tc.after {
				t.Fatalf("afterRead = %v, want refused %v", err, tc.after)
			}
			if err != nil && !errors.Is(err, ErrTombstonesMayBeLost) {
				t.Errorf("afterRead error %v does not unwrap to ErrTombstonesMayBeLost", err)
			}
		})
	}
}

func TestTombstoneErrorMessage(t *testing.T) {
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	var many []partRange
	for p := range int32(10) {
		many = append(many, partRange{partition: p, from: 1, end: 7})
	}
	for _, tc := range []struct {
		name string
		err  *TombstoneError
		want []string
	}{
		{"before reading", &TombstoneError{Topic: "t", Partitions: many[:1], Elapsed: 25 * time.Hour, UpdatedAt: at,
			Retention: retention{compact: true, deleteRetentionMs: 86400000}},
			[]string{`topic "t": tombstones may have been removed before they were read: partition 0 (unread from saved offset 1 to 7): ` +
				`25h0m0s have passed since kafka_state.positions.updated_at 2026-12-01T08:00:00Z`,
				"delete.retention.ms=86400000 (less a margin of 5m0s)", "nothing was changed", "Rebuild into an empty destination",
				"raise the topic's delete.retention.ms"}},
		{"many partitions", &TombstoneError{Topic: "t", Partitions: many, Elapsed: time.Second, UpdatedAt: at},
			[]string{"partitions 0 (unread from saved offset 1 to 7), 1 (", "7 (unread from saved offset 1 to 7) and 2 more:"}},
		{"updated_at in the future", &TombstoneError{Topic: "t", Partitions: many[:1], Elapsed: -30 * time.Hour, UpdatedAt: at, Future: true,
			Retention: retention{compact: true, deleteRetentionMs: 86400000}},
			[]string{"partition 0 (unread from saved offset 1 to 7): kafka_state.positions.updated_at 2026-12-01T08:00:00Z is 30h0m0s ahead of PostgreSQL's clock",
				"nothing was changed", "Rebuild into an empty destination"}},
		{"after a first run's reads", &TombstoneError{Topic: "t", Partitions: []partRange{{partition: 3, from: 0, end: 4, reached: 4}},
			Elapsed: 1500 * time.Millisecond, AfterRead: true, Read: 1500 * time.Millisecond, Retention: retention{compact: true, deleteRetentionMs: 1000}},
			[]string{"partition 3 (read from saved offset 0 to 4): 1.5s had passed by the end of this batch's reads (which took 1.5s) since the start of this batch",
				"a single batch's reads took longer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := tc.err.Error() + "\nhint: " + Hint(tc.err)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q\ndoes not contain %q", msg, w)
				}
			}
		})
	}
}
