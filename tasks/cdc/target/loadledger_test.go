package target

import (
	"maps"
	"testing"
)

func TestTableLoads(t *testing.T) {
	start := func(gen, tbl string) LoadRow { return LoadRow{Gen: gen, Kind: LoadStart, Table: tbl} }
	chunk := func(gen, tbl string, point uint64) LoadRow {
		return LoadRow{Gen: gen, Kind: LoadChunk, Table: tbl, Point: point}
	}
	done := func(gen, tbl string, point uint64) LoadRow {
		return LoadRow{Gen: gen, Kind: LoadDone, Table: tbl, Point: point}
	}
	withRelid := func(r LoadRow, relid uint64) LoadRow { r.Relid = relid; return r }
	for _, tc := range []struct {
		name string
		rows []LoadRow
		want map[string]TableLoad
	}{
		{"none", nil, map[string]TableLoad{}},
		{"the slot's load, continued: every table at its highest point",
			[]LoadRow{start("1", ""), chunk("1", "a", 10), chunk("1", "b", 10), chunk("1", "a", 30), chunk("1", "b", 30)},
			map[string]TableLoad{"a": {Gen: "1", Done: true, Point: 30}, "b": {Gen: "1", Done: true, Point: 30}}},
		{"a later load of the slot wins",
			[]LoadRow{start("1", ""), chunk("1", "a", 10), chunk("1", "b", 10), start("2", ""), chunk("2", "a", 50)},
			map[string]TableLoad{"a": {Gen: "2", Done: true, Point: 50}}},
		{"a joined table, its load ended at its own point",
			[]LoadRow{start("1", ""), chunk("1", "a", 10), start("5", "c"), chunk("5", "c", 70), chunk("5", "c", 90), done("5", "c", 90)},
			map[string]TableLoad{"a": {Gen: "1", Done: true, Point: 10}, "c": {Gen: "5", Done: true, Point: 90}}},
		{"a joined table whose load was cut",
			[]LoadRow{start("1", ""), chunk("1", "a", 10), start("5", "c"), chunk("5", "c", 70)},
			map[string]TableLoad{"a": {Gen: "1", Done: true, Point: 10}, "c": {Gen: "5", Done: false, Point: 70}}},
		{"a joined table's later generation, not ended",
			[]LoadRow{start("1", ""), chunk("1", "a", 10), start("5", "c"), chunk("5", "c", 70), done("5", "c", 70), start("6", "c")},
			map[string]TableLoad{"a": {Gen: "1", Done: true, Point: 10}, "c": {Gen: "6", Done: false, Point: 0}}},
		{"two tables joined in one generation",
			[]LoadRow{start("1", ""), chunk("1", "a", 10), start("5", "c"), start("5", "d"), chunk("5", "c", 70), chunk("5", "d", 70), done("5", "c", 70)},
			map[string]TableLoad{"a": {Gen: "1", Done: true, Point: 10}, "c": {Gen: "5", Done: true, Point: 70}, "d": {Gen: "5", Done: false, Point: 70}}},
		{"the OIDs of the tables loaded, the latest generation's",
			[]LoadRow{start("1", ""), withRelid(chunk("1", "a", 10), 7), start("5", "c"), withRelid(chunk("5", "c", 70), 9), withRelid(done("5", "c", 70), 9)},
			map[string]TableLoad{"a": {Gen: "1", Done: true, Point: 10, Relid: 7}, "c": {Gen: "5", Done: true, Point: 70, Relid: 9}}},
		{"joined before the slot was loaded again: not loaded",
			[]LoadRow{start("1", ""), chunk("1", "a", 10), start("5", "c"), done("5", "c", 70), start("7", ""), chunk("7", "a", 99)},
			map[string]TableLoad{"a": {Gen: "7", Done: true, Point: 99}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tableLoads(tc.rows); !maps.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
