package main

import "testing"

func TestPercentile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	for _, tc := range []struct {
		name   string
		sorted []float64
		p      float64
		want   float64
	}{
		{"empty", nil, 0.5, 0},
		{"one value", []float64{7}, 0.99, 7},
		{"median of an odd count", []float64{1, 2, 3}, 0.5, 2},
		{"median of an even count: the lower", []float64{1, 2, 3, 4}, 0.5, 2},
		{"p99 of 1..100", hundred, 0.99, 99},
		{"p50 of 1..100", hundred, 0.50, 50},
		{"p100", hundred, 1, 100},
		{"p0: the first", hundred, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.sorted, tc.p); got != tc.want {
				t.Errorf("percentile(%v…, %v) = %v, want %v", tc.sorted[:min(len(tc.sorted), 3)], tc.p, got, tc.want)
			}
		})
	}
}
