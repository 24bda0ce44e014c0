package target

import (
	"strings"
	"testing"
	"time"
)

// TestClusterHolderLive: a claim or a hold whose newest beat is at most
// stale old is live; a withdrawn or released holder never is.
func TestClusterHolderLive(t *testing.T) {
	stale := 30 * time.Second
	tests := []struct {
		state string
		age   time.Duration
		want  bool
	}{
		{stateClaim, time.Second, true}, {stateHeld, stale, true}, {stateHeld, stale + time.Second, false},
		{stateGone, 0, false}, {stateClaim, time.Hour, false},
	}
	for _, tt := range tests {
		h := clusterHolder{holderInfo: holderInfo{age: tt.age}, state: tt.state}
		if got := h.live(stale); got != tt.want {
			t.Errorf("%s, %s old: live = %v, want %v", tt.state, tt.age, got, tt.want)
		}
	}
}

// TestBrokenBy: the holders a run that took the lock broke are the dead
// ones (stale, not gone) no other run claimed after and held since.
func TestBrokenBy(t *testing.T) {
	stale := 30 * time.Second
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	h := func(id, state string, newest time.Time, claimed time.Time, held bool) clusterHolder {
		return clusterHolder{holderInfo: holderInfo{id: id, age: now.Sub(newest)}, state: state, newest: newest, claimed: claimed, held: held}
	}
	dead := h("dead", stateHeld, now.Add(-40*time.Second), now.Add(-50*time.Second), true)
	tests := []struct {
		name string
		all  []clusterHolder
		want []string
	}{
		{"a dead holder alone", []clusterHolder{dead}, []string{"dead"}},
		{"a dead claimant", []clusterHolder{h("claimant", stateClaim, now.Add(-40*time.Second), now.Add(-40*time.Second), false)}, []string{"claimant"}},
		{"broken before by a run that held and released", []clusterHolder{dead,
			h("breaker", stateGone, now.Add(-5*time.Second), now.Add(-9*time.Second), true)}, nil},
		{"broken before by a run that held and died", []clusterHolder{dead,
			h("breaker", stateHeld, now.Add(-35*time.Second), now.Add(-39*time.Second), true)}, []string{"breaker"}},
		{"a run that claimed after it but withdrew", []clusterHolder{dead,
			h("withdrawn", stateGone, now.Add(-5*time.Second), now.Add(-5*time.Second), false)}, []string{"dead"}},
		{"a run that held before it", []clusterHolder{dead,
			h("before", stateGone, now.Add(-55*time.Second), now.Add(-59*time.Second), true)}, []string{"dead"}},
		{"live and gone holders", []clusterHolder{h("live", stateHeld, now.Add(-time.Second), now.Add(-9*time.Second), true),
			h("gone", stateGone, now.Add(-40*time.Second), now.Add(-50*time.Second), true)}, nil},
	}
	for _, tt := range tests {
		var got []string
		for _, b := range brokenBy(tt.all, stale) {
			got = append(got, b.id)
		}
		if strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("%s: broken %v, want %v", tt.name, got, tt.want)
		}
	}
}
