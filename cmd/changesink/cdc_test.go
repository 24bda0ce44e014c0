package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/amazon-ion/ion-go/ion"

	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc"
)

// cdcBatch writes a small orders batch in Kestra's text form (one value
// per line) or binary form (a version marker and symbol table per row).
func cdcBatch(t *testing.T, path string, binary bool, status string) {
	t.Helper()
	var text bytes.Buffer
	for i, ev := range []struct {
		id      int64
		lsn     int64
		deleted bool
	}{{1, 100, false}, {2, 101, false}, {1, 102, false}, {2, 103, true}} {
		op := "UPDATE"
		if ev.deleted {
			op = "DELETE"
		}
		fmt.Fprintf(&text, `{id:%d,customer_id:7,amount_cents:%d,status:%q,deleted:%t,`+
			`metadata:{operation:%q,timestamp:2024-01-15T10:30:01.001Z,source:{db:"shop",schema:"public",table:"orders",lsn:%d,txId:1,snapshot:"false"}}}`+"\n",
			ev.id, 100+i, status, ev.deleted, op, ev.lsn)
	}
	data := text.Bytes()
	if binary {
		var bin bytes.Buffer
		for _, v := range testenv.IonValues(t, data) {
			chunk, err := ion.MarshalBinary(v)
			if err != nil {
				t.Fatal(err)
			}
			bin.Write(chunk)
		}
		data = bin.Bytes()
	}
	testenv.WriteFile(t, path, data, 0o644)
}

// cdcWorkspace creates, on the test ClickHouse (CHANGESINK_TEST_CLICKHOUSE;
// the test skips loudly without it), a database of its own (dropped when
// the test ends) and a working directory holding the shipped orders mapping
// retargeted to it as orders.mapping.yaml. It returns the server's URL, the
// admin connection (open until the test ends), the database name and the
// directory.
func cdcWorkspace(t *testing.T, prefix string) (chURL string, admin clickhouse.Conn, db, work string) {
	t.Helper()
	chURL = testenv.ClickHouseURL(t)
	db, _ = testenv.CreateClickHouseDatabase(t, chURL, prefix)
	admin = testenv.OpenClickHouse(t, chURL)
	work = t.TempDir()
	retargetMapping(t, "../../flows/orders.mapping.yaml", filepath.Join(work, "orders.mapping.yaml"), db)
	return chURL, admin, db, work
}

// retargetMapping writes the mapping src to dst with its target.database
// set to db, the rest of the file laid out as it was (every other key keeps
// its line and column, which messages quote), and checks that the mapping
// dst names db.
func retargetMapping(t *testing.T, src, dst, db string) {
	t.Helper()
	testenv.WriteFile(t, dst, testenv.RetargetMapping(t, testenv.ReadFile(t, src), db), 0o644)
	if m, err := cdc.LoadMapping(dst); err != nil || m.Target.Database != db {
		t.Fatalf("the retargeted mapping %s: %v", dst, err)
	}
}

// setCDCEnv sets the env of a cdc command run in the workspace work (the
// orders mapping) against the test ClickHouse at chURL without a user or
// password, then env's settings over it.
func setCDCEnv(t *testing.T, work, chURL string, env map[string]string) {
	t.Helper()
	t.Setenv("WORKING_DIR", work)
	t.Setenv("CDC_MAPPING", "orders.mapping.yaml")
	t.Setenv("CLICKHOUSE_URL", chURL)
	t.Setenv("CLICKHOUSE_USERNAME", "")
	t.Setenv("CLICKHOUSE_PASSWORD", "")
	for k, v := range env {
		t.Setenv(k, v)
	}
}

// TestCDCCommands runs cdc setup and apply through the command line against
// the test ClickHouse, then the failing runs an operator meets (a refused
// batch, a mapping with a mistake, a wrong password, a password in the DSN,
// a server that is down), and checks the exit codes, the outputs, the
// files, and that no password appears anywhere in stdout.
//
//changesink:per-server
func TestCDCCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	chURL, _, db, work := cdcWorkspace(t, "cdc_cmd_")
	cdcBatch(t, filepath.Join(work, "changes.ion"), false, "new ✓")
	cdcBatch(t, filepath.Join(work, "binary.ion"), true, "new ✓")
	cdcBatch(t, filepath.Join(work, "bad.ion"), false, strings.Repeat("x", 33))

	secret := "cdc-Secret-" + testenv.RandomHex(6)
	dsnSecret := "dsn-Secret-" + testenv.RandomHex(6)
	u, _ := url.Parse(chURL)
	withUser := *u
	withUser.User = url.UserPassword("default", dsnSecret)
	down := *u
	down.Host = testenv.ClosedAddr(t)

	var all bytes.Buffer
	step := func(name string, wantCode int, wants []string, env map[string]string, args ...string) string {
		t.Helper()
		t.Setenv("CDC_BATCH_FILE", "")
		os.Unsetenv("CDC_BATCH_FILE")
		setCDCEnv(t, work, chURL, env)
		var out bytes.Buffer
		code := run(ctx, args, &out)
		all.Write(out.Bytes())
		for _, w := range wants {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: output lacks %q:\n%s", name, w, out.String())
			}
		}
		if code != wantCode {
			t.Errorf("%s: exit %d, want %d; output:\n%s", name, code, wantCode, out.String())
		}
		return out.String()
	}

	step("setup", 0, []string{`"table":"` + db + `.orders_cdc"`, `"view":"` + db + `.orders_live"`, `"server_version":`}, nil, "cdc", "setup")
	step("setup again", 0, []string{`"table":"` + db + `.orders_cdc"`}, nil, "cdc", "setup")
	out := step("apply (default file changes.ion)", 0, []string{
		`::{"outputs":{"deletes":1,"events":4,"keys":2,"pending":2,"recreated":0,"skipped":0,"snapshot_deleted":0,"verified":2}}::`,
		"4 captured events, 2 newer keys applied (1 deletes), 0 replayed/older keys skipped. Read-back verified; query " + db + ".orders_live for current rows.",
		`{"name":"events","type":"counter","value":4`, `"type":"timer"`,
	}, nil, "cdc", "apply")
	if strings.Index(out, "captured events") > strings.Index(out, `::{"outputs"`) {
		t.Errorf("the summary should come before the outputs line:\n%s", out)
	}
	exp := testenv.ReadFile(t, filepath.Join(work, "expected.jsonl"))
	if want := `{"id": 1, "customer_id": 7, "amount_cents": 102, "status": "new ✓", "_cdc_lsn": 102, "_cdc_deleted": 0}
{"id": 2, "customer_id": 0, "amount_cents": 0, "status": "", "_cdc_lsn": 103, "_cdc_deleted": 1}
`; string(exp) != want {
		t.Errorf("expected.jsonl:\n%s\nwant\n%s", exp, want)
	}
	step("apply the binary form of the same batch", 0, []string{`"pending":0`, `"skipped":2`, `"verified":2`},
		map[string]string{"CDC_BATCH_FILE": "binary.ion", "CLICKHOUSE_USERNAME": "default"}, "cdc", "apply")

	for _, f := range []string{"expected.jsonl", "pending.jsonl"} {
		os.Remove(filepath.Join(work, f))
	}
	step("refused batch", 1, []string{`"error_class":"refused"`, `record 1 (line 1, key id=1, LSN 100), column \"status\": value does not fit its column: 33 characters exceed max_length 32`},
		map[string]string{"CDC_BATCH_FILE": "bad.ion", "CLICKHOUSE_PASSWORD": secret}, "cdc", "apply")
	if _, err := os.Stat(filepath.Join(work, "expected.jsonl")); !os.IsNotExist(err) {
		t.Errorf("a refused run left expected.jsonl: %v", err)
	}
	mapping := testenv.ReadFile(t, filepath.Join(work, "orders.mapping.yaml"))
	testenv.WriteFile(t, filepath.Join(work, "broken.mapping.yaml"), []byte(strings.Replace(string(mapping), "max_length: 32", "max_len: 32", 1)), 0o644)
	step("mapping with a mistake", 2, []string{`"error_class":"config"`, `broken.mapping.yaml:26:5: unknown key \"max_len\" in a column (known keys: name, type, max_length, source_type)`},
		map[string]string{"CDC_MAPPING": "broken.mapping.yaml"}, "cdc", "apply")
	step("missing batch file", 2, []string{`"error_class":"config"`, "no-such.ion"},
		map[string]string{"CDC_BATCH_FILE": "no-such.ion"}, "cdc", "apply")
	step("wrong password", 2, []string{`"error_class":"config"`},
		map[string]string{"CLICKHOUSE_PASSWORD": secret}, "cdc", "apply")
	step("password in the DSN", 2, []string{`"error_class":"config"`},
		map[string]string{"CLICKHOUSE_URL": withUser.String()}, "cdc", "setup")
	step("server down", 3, []string{`"error_class":"transient"`, down.Host},
		map[string]string{"CLICKHOUSE_URL": down.String(), "CLICKHOUSE_PASSWORD": secret}, "cdc", "apply")
	step("bad URL", 2, []string{`"error_class":"config"`},
		map[string]string{"CLICKHOUSE_URL": "clickhouse://default:" + dsnSecret + "@127.0.0.1:notaport/x"}, "cdc", "setup")

	for _, s := range []string{secret, dsnSecret} {
		if strings.Contains(all.String(), s) {
			t.Errorf("a password appears in the output:\n%s", all.String())
		}
	}
	for _, line := range strings.Split(all.String(), "\n") {
		if strings.HasPrefix(line, "::") && strings.Contains(line, `"outputs"`) && strings.Contains(line, `"error"`) && strings.Contains(line, `"events"`) {
			t.Errorf("a failed run printed success outputs: %s", line)
		}
	}
}

// TestCDCFaultExitCodes runs faults an adversarial review found through
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
//
//changesink:per-server
func TestCDCFaultExitCodes(t *testing.T) {
	vars := testenv.Lookup(t, "CHANGESINK_TEST_CLICKHOUSE_HTTP")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	chURL, admin, db, work := cdcWorkspace(t, "cdc_brk_")
	if err := admin.Exec(ctx, "CREATE TABLE "+db+".orders_cdc (id Int64, customer_id Int64, amount_cents Int64, "+
		"_cdc_lsn UInt64, _cdc_deleted UInt8) ENGINE = ReplacingMergeTree(_cdc_lsn) ORDER BY id"); err != nil {
		t.Fatal(err)
	}

	if err := os.Mkdir(filepath.Join(work, "a-directory"), 0o755); err != nil {
		t.Fatal(err)
	}
	bad := []byte("{id:3,customer_id:1,amount_cents:1,status:\"a\xffb\",deleted:false," +
		"metadata:{operation:\"UPDATE\",source:{db:\"shop\",schema:\"public\",table:\"orders\",lsn:42}}}\n")
	testenv.WriteFile(t, filepath.Join(work, "not-utf8.ion"), bad, 0o644)

	secret := "brk-Secret-" + testenv.RandomHex(6)
	u, _ := url.Parse(chURL)
	tlsURL := *u
	tlsURL.Scheme = "clickhouse"
	tlsURL.User = url.UserPassword("default", secret)
	q := tlsURL.Query()
	q.Set("secure", "true")
	tlsURL.RawQuery = q.Encode()
	badPort := *u
	badPort.User = url.UserPassword("default", secret)
	badPort.Host = "127.0.0.1:99999"
	httpPort := *u
	httpPort.Scheme = "clickhouse" // the native protocol's URL at the HTTP port, whatever the server under test is reached by
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
		{"HTTP port instead of native", 2, []string{`"error_class":"config"`, "answers as ClickHouse's HTTP interface", "Set CLICKHOUSE_URL to the native protocol"},
			map[string]string{"CLICKHOUSE_URL": httpPort.String()}, []string{"cdc", "setup"}},
		// A 10-byte password: its length byte is '\n', which ends the HTTP
		// interface's request line, so it answers at once (exit 4 before).
		{"HTTP port, 10-byte password", 2, []string{`"error_class":"config"`, "answers as ClickHouse's HTTP interface", "Set CLICKHOUSE_URL to the native protocol"},
			map[string]string{"CLICKHOUSE_URL": httpPort.String(), "CLICKHOUSE_USERNAME": "default", "CLICKHOUSE_PASSWORD": secret[:10]}, []string{"cdc", "setup"}},
		{"batch file is a directory", 2, []string{`"error_class":"config"`, "a-directory"},
			map[string]string{"CDC_BATCH_FILE": "a-directory", "CLICKHOUSE_PASSWORD": secret}, []string{"cdc", "apply"}},
		{"existing table lacks a column", 2, []string{`"error_class":"config"`, `has no column \"status\"`},
			nil, []string{"cdc", "setup"}},
		{"string not UTF-8", 1, []string{`"error_class":"refused"`, `record 1 (line 1, key id=3, LSN 42), column \"status\": malformed Ion`},
			map[string]string{"CDC_BATCH_FILE": "not-utf8.ion"}, []string{"cdc", "apply"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("CDC_CLICKHOUSE_TIMEOUT", "20s")
			t.Setenv("CDC_BATCH_FILE", "changes.ion")
			setCDCEnv(t, work, chURL, c.env)
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

// TestCDCOutputFileCannotBeWritten: a working directory that cannot take
// the output files (a full disk; here a file-size limit of 0, which fails
// the write the same way with EFBIG) made cdc apply exit 4, "internal",
// with "write expected.jsonl: ...: file too large": a bug to report, and
// not saying that none of the batch was written nor what to do. It is
// transient (exit 3) naming WORKING_DIR, with nothing written and no output
// file left; the re-run with room converges.
func TestCDCOutputFileCannotBeWritten(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	chURL, admin, db, work := cdcWorkspace(t, "cdc_full_")
	cdcBatch(t, filepath.Join(work, "changes.ion"), false, "new")
	setCDCEnv(t, work, chURL, nil)
	var out bytes.Buffer
	if code := run(ctx, []string{"cdc", "setup"}, &out); code != 0 {
		t.Fatalf("setup: exit %d:\n%s", code, out.String())
	}
	bin := testenv.BuildChangesink(t)
	// ulimit -f 0: every write to a regular file fails (stdout is a pipe).
	cmd := exec.CommandContext(ctx, "sh", "-c", `ulimit -f 0 && exec "$0" cdc apply`, bin)
	res, err := testenv.Run(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if res.Code != 3 {
		t.Errorf("exit %d, want 3 (transient):\n%s", res.Code, res.Output())
	}
	for _, w := range []string{`"error_class":"transient"`, "expected.jsonl", "WORKING_DIR", "none of it was written to ClickHouse", "re-run"} {
		if !strings.Contains(res.Stdout, w) {
			t.Errorf("output lacks %q:\n%s", w, res.Output())
		}
	}
	var rows uint64
	if err := admin.QueryRow(ctx, "SELECT count() FROM "+db+".orders_cdc").Scan(&rows); err != nil || rows != 0 {
		t.Errorf("the target holds %d rows (%v), want none", rows, err)
	}
	if entries, _ := os.ReadDir(work); len(entries) != 2 {
		t.Errorf("the failed run left files in the working directory: %v", entries)
	}
	out.Reset()
	if code := run(ctx, []string{"cdc", "apply"}, &out); code != 0 || !strings.Contains(out.String(), `"pending":2`) {
		t.Errorf("the re-run: exit %d, want 0 with the batch applied:\n%s", code, out.String())
	}
}

// TestCDCCheck runs cdc check through the command line, as a Kestra task
// runs it: on a source and target setup would take, exit 0 with ok true;
// with a table that does not exist and a source password in the DSN,
// exit 2, the problem and its fix in the outputs and the log, the
// password nowhere, and nothing created on the source.
func TestCDCCheck(t *testing.T) {
	admin := testenv.Lookup(t, "CHANGESINK_TEST_PG")["CHANGESINK_TEST_PG"]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	chURL, _, db, work := cdcWorkspace(t, "cdc_check_")
	name := testenv.UniqueName(t, "check_")
	secret := "pg-Secret-" + testenv.RandomHex(6)
	testenv.CreateRole(t, admin, name, secret)
	testenv.ExecPostgres(t, admin, `ALTER ROLE `+name+` REPLICATION`)
	dsn := testenv.CreateDatabase(t, admin, name, name)
	owner := testenv.WithPassword(t, testenv.WithUser(t, dsn, name), secret)
	testenv.ExecPostgres(t, owner, `CREATE TABLE orders (id int PRIMARY KEY, status text)`)
	testenv.WriteFile(t, filepath.Join(work, "sync.yaml"), []byte("defaults: {target: {database: "+db+"}}\n"), 0o644)
	check := func(tables string) (int, string) {
		setCDCEnv(t, work, chURL, map[string]string{"CDC_MAPPING": "sync.yaml", "CDC_POSTGRES_DSN": owner, "CDC_TABLES": tables,
			"CDC_SLOT": name, "CDC_PUBLICATION": name})
		var out bytes.Buffer
		code := run(ctx, []string{"cdc", "check"}, &out)
		if strings.Contains(out.String(), secret) {
			t.Errorf("the password appears in the output:\n%s", out.String())
		}
		return code, out.String()
	}
	if code, out := check("public.orders"); code != 0 || !strings.Contains(out, `"ok":true`) || !strings.Contains(out, "setup would succeed: 1 tables") {
		t.Errorf("check of a source setup would take: exit %d:\n%s", code, out)
	}
	code, out := check("public.orders,public.ghost")
	for _, w := range []string{`"ok":false`, `"errors":1`, `table public.ghost: table does not exist`, `"fix":"Create the table`,
		`problem 1 of 1, source: table public.ghost`, `"error_class":"config"`} {
		if !strings.Contains(out, w) {
			t.Errorf("check with a missing table: output lacks %q:\n%s", w, out)
		}
	}
	if code != 2 {
		t.Errorf("check with a missing table: exit %d, want 2", code)
	}
	if got := testenv.QueryPostgres(t, admin, `SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = '`+name+`'`); got[0] != "0" {
		t.Errorf("cdc check made the slot %s", name)
	}
}
