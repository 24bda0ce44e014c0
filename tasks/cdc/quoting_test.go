package cdc

import (
	"testing"

	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/changesink/changesink/internal/iongen"
)

// TestApplyQuotedNames runs setup and apply with names that need quoting
// (keywords, dashes, non-ASCII) as keys and columns, on the test server;
// the keys also travel in the external table.
//
//changesink:per-server
func TestApplyQuotedNames(t *testing.T) {
	e := newEnv(t, "testdata/quoting.mapping.yaml")
	e.setup()
	src := func(lsn int64, del bool) iongen.Struct {
		op := "UPDATE"
		if del {
			op = "DELETE"
		}
		return iongen.Metadata(op, iongen.Source("app", "public", "order", lsn, 1, "false"))
	}
	r := func(sel int64, name string, day any) iongen.Struct {
		return iongen.Struct{{"select", sel}, {"naïve", name}, {"from-to", day}, {"my-key", int64(9)}}
	}
	batch := []any{
		iongen.Event(r(1, "a", nil), false, src(5, false)),
		iongen.Event(r(1, "a", iongen.Day(2024, 2, 29)), false, src(7, false)),
		iongen.Event(r(2, "b b", nil), false, src(6, false)),
		iongen.Event(iongen.Struct{{"select", int64(2)}, {"naïve", "b b"}, {"my-key", int64(9)}}, true, src(8, true)),
	}
	for i, binary := range []bool{false, true} {
		res, _, err := e.apply(binary, batch...)
		if err != nil {
			t.Fatal(err)
		}
		if res.Verified != 2 || res.Pending != int64(2*(1-i)) {
			t.Errorf("run %d: %v", i+1, res.Outputs())
		}
	}
	if got := e.query("SELECT count() FROM " + mapping.QuoteIdent(e.db) + "." + mapping.QuoteIdent("order live")); got[0] != "1" {
		t.Errorf("live rows %v", got)
	}
}
