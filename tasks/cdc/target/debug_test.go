package target

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/testenv"
)

// TestDebugURLWritesNothingToStdout: debug=true in CLICKHOUSE_URL would
// have the driver print its log to stdout, which in Kestra mode holds
// protocol lines only (issue 28): it is ignored.
//
//changesink:per-server
func TestDebugURLWritesNothingToStdout(t *testing.T) {
	url := testenv.ClickHouseURL(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = stdout }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Connect(ctx, ClickHouse{URL: url + "?debug=true", Timeout: time.Minute}, nil)
	if err == nil {
		err = s.exec(ctx, "SELECT 1")
		s.Close()
	}
	os.Stdout = stdout
	w.Close()
	printed, _ := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(printed) > 0 {
		t.Errorf("the driver printed to stdout:\n%s", printed)
	}
}
