package target

import (
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
