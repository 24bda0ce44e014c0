package parity

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/testenv"
)

// chClient runs clickhouse-client as CHANGESINK_TEST_CLICKHOUSE_CLIENT
// names it: the seed pipeline's reads and insert go through it, as do the
// test's own checks.
type chClient struct {
	argv []string
}

// chJSONSettings make JSONEachRow print Int64/UInt64 as JSON numbers, as
// Kestra's JDBC Query → Ion → IonToJson path does (clickhouse-client quotes
// 64-bit integers by default, which would turn the seed's ids into strings).
var chJSONSettings = []string{"--output_format_json_quote_64bit_integers=0"}

// run executes one query (or several with multi), feeding stdin when not
// nil, and returns stdout.
func (c chClient) run(query string, stdin []byte, multi bool) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append(append([]string{}, c.argv[1:]...), chJSONSettings...)
	if multi {
		args = append(args, "--multiquery")
	}
	args = append(args, "--query", query)
	cmd := exec.CommandContext(ctx, c.argv[0], args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	res, err := testenv.Run(cmd)
	if err == nil && res.Code != 0 {
		err = fmt.Errorf("exit %d (signal %d)", res.Code, res.Signal)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = errors.Join(err, ctx.Err())
		}
		return res.Stdout, fmt.Errorf("clickhouse-client %q: %w: %s", query, err, strings.TrimSpace(res.Stderr))
	}
	return res.Stdout, nil
}

func (c chClient) must(t *testing.T, query string) string {
	t.Helper()
	out, err := c.run(query, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// isDeletedServer reports a server on which cdc setup makes the target a
// ReplacingMergeTree(version, deleted): 23.2 and newer.
func isDeletedServer(t *testing.T, c chClient) bool {
	t.Helper()
	var major, minor int
	v := strings.TrimSpace(c.must(t, "SELECT version()"))
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		t.Fatalf("server version %q: %v", v, err)
	}
	return major > 23 || (major == 23 && minor >= 2)
}

// orderRows returns the winning rows of db.orders_cdc (FINAL), one
// JSONEachRow line each, ordered by id, plus the physical row count (to
// prove a refused batch wrote nothing).
func orderRows(t *testing.T, c chClient, db string) (final []string, physical string) {
	t.Helper()
	out := c.must(t, "SELECT id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted FROM "+db+
		".orders_cdc FINAL ORDER BY id FORMAT JSONEachRow")
	physical = strings.TrimSpace(c.must(t, "SELECT count() FROM "+db+".orders_cdc"))
	return splitLines(out), physical
}

func splitLines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
