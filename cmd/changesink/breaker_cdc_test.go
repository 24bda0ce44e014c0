package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/testenv"
)

// TestBreakerCDCFaultExitCodes runs the faults the breaker found through
// the command line, as a Kestra task runs it: each exits with the code
// README's table gives (they were 4 "internal, please report it" or 3
// "transient, retry"), every protocol line is one line of ASCII JSON, and
// no password appears.
//   - secure=true against the plaintext native port: config (2);
//   - a port outside 1..65535: config (2);
//   - the HTTP port instead of the native one: config (2) within seconds,
//     naming the native port (it waited out the whole timeout, transient);
//   - CDC_BATCH_FILE naming a directory: config (2);
//   - setup over an existing table that lacks a mapped column: config (2),
//     naming the column;
//   - a text batch with a string that is not UTF-8: refused (1), naming the
//     record, key, LSN and column.
func TestBreakerCDCFaultExitCodes(t *testing.T) {
	vars := testenv.Lookup(t, "CHANGESINK_TEST_CLICKHOUSE", "CHANGESINK_TEST_CLICKHOUSE_HTTP")
	chURL := vars["CHANGESINK_TEST_CLICKHOUSE"]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, db, work := cdcWorkspace(ctx, t, chURL, "cdc_brk_")
	if err := admin.Exec(ctx, "CREATE TABLE "+db+".orders_cdc (id Int64, customer_id Int64, amount_cents Int64, "+
		"_cdc_lsn UInt64, _cdc_deleted UInt8) ENGINE = ReplacingMergeTree(_cdc_lsn) ORDER BY id"); err != nil {
		t.Fatal(err)
	}

	if err := os.Mkdir(filepath.Join(work, "a-directory"), 0o755); err != nil {
		t.Fatal(err)
	}
	bad := []byte("{id:3,customer_id:1,amount_cents:1,status:\"a\xffb\",deleted:false," +
		"metadata:{operation:\"UPDATE\",source:{db:\"shop\",schema:\"public\",table:\"orders\",lsn:42}}}\n")
	if err := os.WriteFile(filepath.Join(work, "not-utf8.ion"), bad, 0o644); err != nil {
		t.Fatal(err)
	}

	secret := "brk-Secret-" + testenv.RandomHex(6)
	u, _ := url.Parse(chURL)
	tlsURL := *u
	tlsURL.User = url.UserPassword("default", secret)
	q := tlsURL.Query()
	q.Set("secure", "true")
	tlsURL.RawQuery = q.Encode()
	badPort := *u
	badPort.User = url.UserPassword("default", secret)
	badPort.Host = "127.0.0.1:99999"
	httpPort := *u
	httpPort.Host = vars["CHANGESINK_TEST_CLICKHOUSE_HTTP"]

	var all bytes.Buffer
	for _, c := range []struct {
		name  string
		code  int
		wants []string
		env   map[string]string
		args  []string
	}{
		{"secure=true against plaintext", 2, []string{`"error_class":"config"`, "secure=true"},
			map[string]string{"CLICKHOUSE_URL": tlsURL.String(), "CLICKHOUSE_PASSWORD": secret}, []string{"cdc", "setup"}},
		{"invalid port", 2, []string{`"error_class":"config"`, "invalid port"},
			map[string]string{"CLICKHOUSE_URL": badPort.String()}, []string{"cdc", "setup"}},
		{"HTTP port instead of native", 2, []string{`"error_class":"config"`, "answers as ClickHouse's HTTP interface", "use the native port"},
			map[string]string{"CLICKHOUSE_URL": httpPort.String()}, []string{"cdc", "setup"}},
		{"batch file is a directory", 2, []string{`"error_class":"config"`, "a-directory"},
			map[string]string{"CDC_BATCH_FILE": "a-directory", "CLICKHOUSE_PASSWORD": secret}, []string{"cdc", "apply"}},
		{"existing table lacks a column", 2, []string{`"error_class":"config"`, `has no column \"status\"`},
			nil, []string{"cdc", "setup"}},
		{"string not UTF-8", 1, []string{`"error_class":"refused"`, `record 1 (line 1, key id=3, LSN 42), column \"status\": malformed Ion`},
			map[string]string{"CDC_BATCH_FILE": "not-utf8.ion"}, []string{"cdc", "apply"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("WORKING_DIR", work)
			t.Setenv("CDC_MAPPING", "orders.mapping.yaml")
			t.Setenv("CLICKHOUSE_URL", chURL)
			t.Setenv("CLICKHOUSE_USERNAME", "")
			t.Setenv("CLICKHOUSE_PASSWORD", "")
			t.Setenv("CDC_CLICKHOUSE_TIMEOUT", "20s")
			t.Setenv("CDC_BATCH_FILE", "changes.ion")
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var out bytes.Buffer
			code := run(ctx, c.args, &out)
			all.Write(out.Bytes())
			if code != c.code {
				t.Errorf("exit %d, want %d:\n%s", code, c.code, out.String())
			}
			for _, w := range c.wants {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
	if strings.Contains(all.String(), secret) {
		t.Errorf("the password appears in the output:\n%s", all.String())
	}
	for _, line := range strings.Split(strings.TrimSuffix(all.String(), "\n"), "\n") {
		if !strings.HasPrefix(line, "::") {
			continue
		}
		for _, r := range line {
			if r > 0x7E || r < 0x20 {
				t.Errorf("a protocol line holds %U: %s", r, line)
				break
			}
		}
		var v map[string]any
		if !strings.HasSuffix(line, "::") || json.Unmarshal([]byte(line[2:len(line)-2]), &v) != nil {
			t.Errorf("not a protocol line of JSON: %s", line)
		}
	}
}
