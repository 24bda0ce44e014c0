package kafkastate

import (
	"slices"
	"testing"
)

func TestByPartition(t *testing.T) {
	for _, c := range []struct {
		in, want []string
	}{
		{[]string{"0", "1", "10", "11", "2", "3"}, []string{"0", "1", "2", "3", "10", "11"}},
		{[]string{"x", "10", "2", "a"}, []string{"2", "10", "a", "x"}},
		{nil, nil},
	} {
		got := slices.Clone(c.in)
		slices.SortFunc(got, byPartition)
		if !slices.Equal(got, c.want) {
			t.Errorf("%v sorted: %v, want %v", c.in, got, c.want)
		}
	}
}
