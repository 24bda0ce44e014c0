package kafkastate

import (
	"testing"
	"time"
)

// TestBreakerVerifyMalformedPositions: verify over a positions row whose
// next offset is not an integer failed with PostgreSQL's cast error as an
// internal error (exit 4) naming no topic; materialize refuses the same row
// with ErrBadPositions. verify must refuse it the same way.
func TestBreakerVerifyMalformedPositions(t *testing.T) {
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, 1, nil)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`))
	e.mustRun(t)
	for _, bad := range []string{`{"0": "abc"}`, `{"0": 1e30}`, `{"0": 1.5}`} {
		e.exec(t, `UPDATE kafka_state.positions SET next_offsets = $1::jsonb WHERE topic = $2`, bad, e.topic)
		_, err := Verify(testCtx(t, time.Minute), e.pg, e.topic)
		assertRefused(t, err, ErrBadPositions, e.topic, "kafka_state.positions")
	}
}
