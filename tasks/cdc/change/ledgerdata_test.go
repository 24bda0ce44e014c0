package change

import "testing"

// TestDescribeSource: a source is named by what the batches said of it,
// never with blank fields (issue 28: `from connector  "" (Debezium )`).
func TestDescribeSource(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  *SourceID
		want string
	}{
		{"all", &SourceID{"postgresql", "kestra_1", "3.6.1.Final", "shop"}, `connector postgresql "kestra_1" (Debezium 3.6.1.Final) on database shop`},
		{"only the database", &SourceID{Db: "shop"}, "on database shop"},
		{"no connector details", &SourceID{Name: "x", Db: "shop"}, `"x" on database shop`},
		{"nothing", &SourceID{Version: "3.6.1.Final"}, "an unnamed source"},
		{"nil", nil, "an unnamed source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.src.Describe(); got != tc.want {
				t.Errorf("%q, want %q", got, tc.want)
			}
		})
	}
}
