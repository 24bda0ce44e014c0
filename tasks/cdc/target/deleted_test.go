package target

import "testing"

// TestReplacingArgs reads the version and delete columns of the engines
// setup, the seed flow and a replicated setup make.
func TestReplacingArgs(t *testing.T) {
	for _, tt := range []struct{ full, version, deleted string }{
		{"ReplacingMergeTree(_cdc_lsn) ORDER BY id SETTINGS index_granularity = 8192", "_cdc_lsn", ""},
		{"ReplacingMergeTree(_cdc_lsn, _cdc_deleted) ORDER BY id", "_cdc_lsn", "_cdc_deleted"},
		{"ReplacingMergeTree(`my ver`, `gone`) ORDER BY (a, b)", "my ver", "gone"},
		{"ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/t', '{replica}', _cdc_lsn) ORDER BY id", "_cdc_lsn", ""},
		{"ReplicatedReplacingMergeTree('/t/a,b', '{replica}', _cdc_lsn, _cdc_deleted) ORDER BY id", "_cdc_lsn", "_cdc_deleted"},
		{"ReplacingMergeTree ORDER BY id", "", ""},
		{"ReplacingMergeTree() ORDER BY id", "", ""},
	} {
		v, d := replacingArgs(tt.full)
		if v != tt.version || d != tt.deleted {
			t.Errorf("replacingArgs(%q) = %q, %q; want %q, %q", tt.full, v, d, tt.version, tt.deleted)
		}
	}
}
