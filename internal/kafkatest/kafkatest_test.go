package kafkatest

import (
	"maps"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestPast(t *testing.T) {
	recs := []*kgo.Record{{Partition: 0, Offset: 4}, {Partition: 1, Offset: 0}, {Partition: 0, Offset: 2}}
	if got, want := Past(recs), map[int32]int64{0: 5, 1: 1}; !maps.Equal(got, want) {
		t.Errorf("Past = %v, want %v", got, want)
	}
	if got := Past(nil); len(got) != 0 {
		t.Errorf("Past(nil) = %v, want empty", got)
	}
}
