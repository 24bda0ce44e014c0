package target

import (
	"testing"
	"time"
)

// TestLaterClaim: of two live holders, the one that claimed later keeps the
// lock (a run that found the other stale and took it), by the claims'
// beats, then by holder id; so a holder whose heartbeats come back after
// its lock was broken loses its check, whatever its id.
func TestLaterClaim(t *testing.T) {
	at := func(s int, id string) clusterHolder {
		return clusterHolder{HolderInfo: HolderInfo{ID: id}, claim: time.Unix(int64(1_700_000_000+s), 0)}
	}
	tests := []struct {
		name string
		a, b clusterHolder
		want bool
	}{
		{"later beat", at(40, "aaaa"), at(5, "ffff"), true},
		{"earlier beat", at(5, "ffff"), at(40, "aaaa"), false},
		{"same second, higher id", at(7, "bbbb"), at(7, "aaaa"), true},
		{"same second, lower id", at(7, "aaaa"), at(7, "bbbb"), false},
		{"claim older than the window (zero time)", clusterHolder{HolderInfo: HolderInfo{ID: "zzzz"}}, at(1, "aaaa"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := laterClaim(tt.a, tt.b); got != tt.want {
				t.Errorf("laterClaim(%s at %s, %s at %s) = %v, want %v", tt.a.ID, tt.a.claim, tt.b.ID, tt.b.claim, got, tt.want)
			}
			if tt.a.claim != tt.b.claim || tt.a.ID != tt.b.ID {
				if laterClaim(tt.a, tt.b) == laterClaim(tt.b, tt.a) {
					t.Errorf("laterClaim is not antisymmetric for %s and %s", tt.a.ID, tt.b.ID)
				}
			}
		})
	}
}

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
		h := clusterHolder{HolderInfo: HolderInfo{Age: tt.age}, state: tt.state}
		if got := h.live(stale); got != tt.want {
			t.Errorf("%s, %s old: live = %v, want %v", tt.state, tt.age, got, tt.want)
		}
	}
}
