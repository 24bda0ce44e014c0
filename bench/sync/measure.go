package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/changesink/changesink/bench/internal/benchrun"
)

// timing is one timed process.
type timing struct {
	Seconds float64 `json:"seconds"`
	CPU     float64 `json:"cpu_seconds"`
	RSSMB   float64 `json:"peak_rss_mb"`
}

func measured(p benchrun.Process) timing {
	r := timing{Seconds: p.Elapsed.Seconds(), RSSMB: float64(p.MaxRSSKiB) / 1024}
	if p.State != nil {
		r.CPU = (p.State.UserTime() + p.State.SystemTime()).Seconds()
	}
	return r
}

func (b *bench) line(rep int, name string, r timing, note string) {
	fmt.Printf("  rep %d %-22s %7.3f s %9.0f changes/s  CPU %5.2f s  peak RSS %5.1f MB  %s\n", rep+1, name, r.Seconds,
		float64(b.written.total())/r.Seconds, r.CPU, r.RSSMB, note)
}

// pgRecvlogical drains the repetition's copy of its sync slot to the end
// of the changes with pg_recvlogical, the bytes to /dev/null.
func (b *bench) pgRecvlogical(ctx context.Context, rep int) error {
	s := b.recvSlot(rep)
	p, err := benchrun.Run(ctx, "", os.Environ(), b.recv, "-d", b.dsn, "--slot", s, "--start", "-o", "proto_version=1",
		"-o", "publication_names="+b.name, "-E", b.end, "--no-loop", "-f", "/dev/null")
	if err != nil {
		return err
	}
	r := measured(p)
	b.res.Recvlogical = append(b.res.Recvlogical, r)
	b.line(rep, "pg_recvlogical", r, "")
	return benchrun.ExecSQL(ctx, b.dsn, fmt.Sprintf("SELECT pg_drop_replication_slot('%s')", s))
}

var outputsLine = regexp.MustCompile(`(?m)^::(\{"outputs".*\})::$`)
var durationMetric = regexp.MustCompile(`"name":"duration","type":"timer","value":([0-9.e-]+)`)

// syncOutputs is what cdc sync prints that the benchmark checks.
type syncOutputs struct {
	Changes      int64  `json:"changes"`
	Transactions int64  `json:"transactions"`
	Flushes      int64  `json:"flushes"`
	Ended        string `json:"ended"`
	Tables       map[string]struct {
		Target   string `json:"target"`
		Verified int64  `json:"verified"`
	} `json:"tables"`
}

// sync runs cdc sync on the repetition's slot until caught up and checks
// it applied every change and that each live view holds the source's
// rows.
func (b *bench) sync(ctx context.Context, rep int) error {
	r, err := b.syncWith(ctx, rep, b.bin, "cdc sync")
	b.res.Sync = append(b.res.Sync, r)
	return err
}

// syncCompare is sync with the -compare binary, on its own slot.
func (b *bench) syncCompare(ctx context.Context, rep int) error {
	r, err := b.syncWith(ctx, rep+b.reps, b.compare, "cdc sync (-compare)")
	b.res.Compare = append(b.res.Compare, r)
	return err
}

func (b *bench) syncWith(ctx context.Context, rep int, bin, name string) (timing, error) {
	p, err := benchrun.Run(ctx, b.runDir(rep), b.syncEnv(rep), bin, "cdc", "sync")
	if err != nil {
		return timing{}, fmt.Errorf("cdc sync: %w", err)
	}
	if err := os.WriteFile(filepath.Join(b.runDir(rep), "sync.out"), p.Output, 0o644); err != nil {
		return timing{}, err
	}
	m := outputsLine.FindSubmatch(p.Output)
	var out struct{ Outputs syncOutputs }
	if m == nil || json.Unmarshal(m[1], &out) != nil {
		return timing{}, fmt.Errorf("cdc sync printed no outputs:\n%s", p.Output)
	}
	o := out.Outputs
	if o.Changes != b.written.total() || o.Ended != "caught up" {
		return timing{}, fmt.Errorf("cdc sync applied %d changes (%s), want %d, caught up:\n%s", o.Changes, o.Ended, b.written.total(), p.Output)
	}
	var verified int64
	for _, t := range tables {
		tab, ok := o.Tables["public."+t.name]
		if !ok {
			return timing{}, fmt.Errorf("cdc sync's outputs have no table public.%s", t.name)
		}
		verified += tab.Verified
		n, err := b.chCount(tab.Target + "_live")
		if err != nil {
			return timing{}, err
		}
		if n != b.source[t.name] {
			return timing{}, fmt.Errorf("%s_live holds %d rows, the source table %s %d", tab.Target, n, t.name, b.source[t.name])
		}
	}
	r := measured(p)
	inner := 0.0
	if d := durationMetric.FindSubmatch(p.Output); d != nil {
		inner, _ = strconv.ParseFloat(string(d[1]), 64)
	}
	if bin == b.bin {
		b.res.SyncDuration = append(b.res.SyncDuration, inner)
	}
	b.line(rep%b.reps, name, r, fmt.Sprintf("%d transactions, %d flushes, %d keys verified; its duration metric %.3f s; live views = source",
		o.Transactions, o.Flushes, verified, inner))
	return r, nil
}

// rawInsert exports the rows sync wrote into the repetition's targets
// (untimed) and times clickhouse-client inserting them into empty copies
// of those tables, one table after the other.
func (b *bench) rawInsert(ctx context.Context, rep int) error {
	db := b.chDB(rep)
	var total timing
	var rows int64
	for _, t := range tables {
		file := filepath.Join(b.runDir(rep), t.name+".native")
		if err := b.export(ctx, "SELECT * FROM "+db+"."+t.name+" FORMAT Native", file); err != nil {
			return err
		}
		if _, err := b.ch("CREATE TABLE " + db + ".raw_" + t.name + " AS " + db + "." + t.name); err != nil {
			return err
		}
		insert := "INSERT INTO " + db + ".raw_" + t.name + " FORMAT Native"
		var p benchrun.Process
		var err error
		if b.rawHTTP == "" {
			args := append(append([]string{"-c", `exec "$0" "$@" <"$BENCH_IN"`, b.client[0]}, b.client[1:]...), "--query", insert)
			p, err = benchrun.Run(ctx, "", append(os.Environ(), "BENCH_IN="+file), "/bin/sh", args...)
		} else {
			p, err = benchrun.Run(ctx, "", os.Environ(), "curl", "-sS", "--fail-with-body", "--data-binary", "@"+file,
				"http://"+b.rawHTTP+"/?query="+url.QueryEscape(insert))
		}
		if err != nil {
			return err
		}
		r := measured(p)
		total.Seconds += r.Seconds
		total.CPU += r.CPU
		total.RSSMB = max(total.RSSMB, r.RSSMB)
		n, err := b.chCount(db + ".raw_" + t.name)
		if err != nil {
			return err
		}
		rows += n
		os.Remove(file)
	}
	b.res.RawInsert = append(b.res.RawInsert, total)
	how := "one clickhouse-client per table"
	if b.rawHTTP != "" {
		how = "one curl per table, HTTP"
	}
	b.line(rep, "raw insert", total, fmt.Sprintf("%d rows (the targets' after sync: one per key and flush, fewer once ClickHouse merged), %s", rows, how))
	return nil
}

// export writes a query's output to file (untimed): with clickhouse-client,
// or over HTTP with -raw-http (a clickhouse-client older than the server
// cannot read its newer types, DateTime64 among them).
func (b *bench) export(ctx context.Context, query, file string) error {
	if b.rawHTTP != "" {
		out, err := exec.CommandContext(ctx, "curl", "-sS", "--fail-with-body", "--data-binary", query, "-o", file,
			"http://"+b.rawHTTP+"/").CombinedOutput()
		if err != nil {
			return fmt.Errorf("curl %.80s: %v: %s", query, err, out)
		}
		return nil
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	return b.chTo(f, query)
}

// ch runs a query with clickhouse-client and returns its output.
func (c config) ch(query string) (string, error) {
	var out bytes.Buffer
	if err := c.chTo(&out, query); err != nil {
		return "", err
	}
	return out.String(), nil
}

func (c config) chTo(w io.Writer, query string) error {
	cmd := exec.Command(c.client[0], append(append([]string{}, c.client[1:]...), "--query", query)...)
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("clickhouse-client %.80s: %v: %s", query, err, errb.String())
	}
	return nil
}

func (c config) chCount(table string) (int64, error) {
	out, err := c.ch("SELECT count() FROM " + table)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(out), 10, 64)
}

func findRecvlogical() (string, error) {
	if p, err := exec.LookPath("pg_recvlogical"); err == nil {
		return p, nil
	}
	p := "/usr/lib/postgresql/15/bin/pg_recvlogical"
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("pg_recvlogical not found (PostgreSQL's client tools: .ci/postgres installs them)")
	}
	return p, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func seconds(rs []timing) []float64 {
	var out []float64
	for _, r := range rs {
		out = append(out, r.Seconds)
	}
	return out
}
