package initload

import "testing"

func TestChunkPlan(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pages  uint32
		tuples int64
		rows   int
		step   uint32
		chunks int
	}{
		{"empty", 0, 0, 100_000, defaultChunkPages, 1},
		{"no estimate", 2500, 0, 100_000, defaultChunkPages, 3},
		{"100 rows a page", 10_000, 1_000_000, 100_000, 1000, 10},
		{"a row wider than a page", 5000, 1000, 100_000, 500_000, 1},
		{"one row a chunk at most", 10, 10_000, 1, 1, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step, chunks := chunkPlan(tc.pages, tc.tuples, tc.rows)
			if step != tc.step || chunks != tc.chunks {
				t.Errorf("chunkPlan(%d, %d, %d) = %d, %d; want %d, %d", tc.pages, tc.tuples, tc.rows, step, chunks, tc.step, tc.chunks)
			}
		})
	}
}
