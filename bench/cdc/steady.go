package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/changesink/changesink/bench/internal/benchrun"
)

// steadyState measures the cost growth: for each size in c.steady, a
// target already holding that many rows (loaded server-side with INSERT …
// SELECT FROM numbers(), then merged with OPTIMIZE FINAL), and c.batches
// batches of the main batch's shape (c.events events over c.keys keys, in
// binary Ion as Kestra 2.x writes it) updating existing keys chosen at
// random, each applied by changesink. The physical references are measured
// the same way, with clickhouse-client against a copy of the target: a
// FINAL read of the batch's keys (the keys in an external table, as
// changesink sends them) and a raw INSERT of the batch's final rows. A run
// on an empty target comes first: its first batch is the empty-table run
// the ratios are against.
func (c config) steadyState() error {
	db := fmt.Sprintf("bench_cdc_steady_%d", os.Getpid())
	if _, err := c.ch("CREATE DATABASE "+db, nil); err != nil {
		return err
	}
	defer c.ch("DROP DATABASE IF EXISTS "+db, nil)
	sizes := []int64{0}
	for _, n := range c.steady {
		if n > 0 && n < int64(c.keys) {
			return fmt.Errorf("-steady %d: a target of fewer rows than the batch's %d keys", n, c.keys)
		}
		if n > 0 {
			sizes = append(sizes, n)
		}
	}
	fmt.Printf("steady state: %d batches per target size, each %d events over %d keys (binary Ion), %.0f%% deletes; load %s\n",
		c.batches, c.events, c.keys, 100*c.deletes, benchrun.LoadAvg())
	var rows []steadyRow
	for _, n := range sizes {
		r, err := c.steadySize(db, n)
		if err != nil {
			return fmt.Errorf("target of %d rows: %w", n, err)
		}
		rows = append(rows, r)
	}
	empty := rows[0].first()
	fmt.Println("steady state, seconds per batch (mean over the batches; empty: the first batch into an empty target):")
	fmt.Printf("  %-14s %-36s %-8s %-42s %-8s %s\n", "rows in target", "changesink (read_current, verify)", "vs empty",
		"reference: insert + FINAL read (PREWHERE)", "vs empty", "changesink / reference")
	for _, r := range rows {
		m, name := r.mean(), count(r.size)
		if r.size == 0 {
			m, name = empty, "empty"
		}
		fmt.Printf("  %-14s %6.3f s (%5.3f, %5.3f)%13s %5.2fx   %6.3f s = %5.3f + %5.3f (%5.3f)%10s %5.2fx   %5.2f\n", name,
			m.cs, m.read, m.verify, "", m.cs/empty.cs, m.ref(), m.insert, m.final, m.prewhere, "", m.ref()/empty.ref(), m.cs/m.ref())
	}
	return nil
}

// batchTimes are one batch's measurements, in seconds.
type batchTimes struct {
	cs, decode, read, insert, verify float64 // changesink: total and its timers (insert is the reference's below)
	csInsert                         float64
	final, prewhere                  float64 // reference reads: FINAL … WHERE key IN keys, and with PREWHERE
	rss                              string
}

// ref is the physical reference: the raw insert plus one FINAL read.
func (b batchTimes) ref() float64 { return b.insert + b.final }

type steadyRow struct {
	size    int64
	batches []batchTimes
}

func (r steadyRow) first() batchTimes { return r.batches[0] }

func (r steadyRow) mean() batchTimes {
	var m batchTimes
	for _, b := range r.batches {
		m.cs += b.cs / float64(len(r.batches))
		m.decode += b.decode / float64(len(r.batches))
		m.read += b.read / float64(len(r.batches))
		m.verify += b.verify / float64(len(r.batches))
		m.csInsert += b.csInsert / float64(len(r.batches))
		m.insert += b.insert / float64(len(r.batches))
		m.final += b.final / float64(len(r.batches))
		m.prewhere += b.prewhere / float64(len(r.batches))
	}
	return m
}

func count(n int64) string {
	switch {
	case n%1_000_000 == 0:
		return strconv.FormatInt(n/1_000_000, 10) + "M rows"
	case n%1_000 == 0:
		return strconv.FormatInt(n/1_000, 10) + "k rows"
	}
	return strconv.FormatInt(n, 10) + " rows"
}

// steadySize loads a target of n rows and its reference copy, then applies
// the batches.
func (c config) steadySize(db string, n int64) (steadyRow, error) {
	row := steadyRow{size: n}
	table, ref := fmt.Sprintf("steady_%d", n), fmt.Sprintf("ref_%d", n)
	dir, err := os.MkdirTemp(c.dir, "steady-")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(dir)
	mapping, err := c.mapping(dir, db, table)
	if err != nil {
		return row, err
	}
	env := append(os.Environ(), "WORKING_DIR="+dir, "CDC_MAPPING="+mapping, "CLICKHOUSE_URL="+c.chURL)
	if out, err := execIn(dir, env, nil, c.bin, "cdc", "setup"); err != nil {
		return row, fmt.Errorf("setup: %v\n%s", err, out)
	}
	if _, err := c.ch("CREATE TABLE "+db+"."+ref+" AS "+db+"."+table, nil); err != nil {
		return row, err
	}
	if n > 0 {
		start := time.Now()
		load := fmt.Sprintf("INSERT INTO %s.%s (id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted) "+
			"SELECT toInt64(number + 1), toInt64(number %% 100000), toInt64(number %% 1000000) - 1000, "+
			"['new', 'paid', 'shipped', 'cancelled'][number %% 4 + 1], toUInt64(1000), toUInt8(0) FROM numbers(%d)", db, table, n)
		if _, err := c.ch(load, nil); err != nil {
			return row, err
		}
		loaded := time.Since(start)
		if err := c.optimize(db, table); err != nil {
			return row, err
		}
		merged := time.Since(start) - loaded
		if _, err := c.ch("INSERT INTO "+db+"."+ref+" SELECT * FROM "+db+"."+table, nil); err != nil {
			return row, err
		}
		if err := c.optimize(db, ref); err != nil {
			return row, err
		}
		fmt.Printf("  %s: loaded in %s, merged into %s in %s; its copy for the reference in %s\n", count(n),
			loaded.Round(time.Millisecond), c.parts(db, table), merged.Round(time.Millisecond), (time.Since(start) - loaded - merged).Round(time.Millisecond))
	}
	for b := range c.batches {
		spec := batchSpec{dir: dir, lsnBase: 2_000_000_000 + int64(b)*10_000_000, firstOp: "UPDATE", seed: uint64(1000*n + int64(b)), binaryOnly: true}
		if n == 0 {
			spec.keyID = func(k int64) int64 { return k + 1 }
			if b == 0 {
				spec.firstOp = "CREATE"
			}
		} else {
			ids := randomKeys(n, c.keys, spec.seed)
			spec.keyID = func(k int64) int64 { return ids[k] }
		}
		f, err := generateBatch(c, spec)
		if err != nil {
			return row, err
		}
		cs, err := c.apply(dir, append(env, "CDC_BATCH_FILE="+f.binary))
		if err != nil {
			return row, err
		}
		t := batchTimes{cs: cs.seconds, decode: cs.timers["decode"], read: cs.timers["read_current"], csInsert: cs.timers["insert"],
			verify: cs.timers["verify"], rss: cs.rss}
		read := func(where string) (float64, error) {
			start := time.Now()
			_, err := c.ch("SELECT id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted FROM "+db+"."+ref+" FINAL "+where+
				" id IN (SELECT k0 FROM _cdc_keys) FORMAT Native", nil, "--external", "--file="+f.keys, "--name=_cdc_keys", "--structure=k0 Int64")
			return time.Since(start).Seconds(), err
		}
		if t.final, err = read("WHERE"); err != nil {
			return row, err
		}
		if t.prewhere, err = read("PREWHERE"); err != nil {
			return row, err
		}
		tsv, err := os.Open(f.tsv)
		if err != nil {
			return row, err
		}
		start := time.Now()
		_, err = c.ch("INSERT INTO "+db+"."+ref+" FORMAT TSV", tsv)
		tsv.Close()
		if err != nil {
			return row, err
		}
		t.insert = time.Since(start).Seconds()
		row.batches = append(row.batches, t)
		name := "empty target"
		if n > 0 {
			name = count(n)
		}
		fmt.Printf("  %s, batch %d: changesink %.3f s (decode %.3f, read_current %.3f, insert %.3f, verify %.3f; peak RSS %s); "+
			"reference: FINAL read %.3f s (PREWHERE %.3f), insert %.3f s; then %s\n", name, b+1, t.cs, t.decode, t.read, t.csInsert, t.verify, t.rss,
			t.final, t.prewhere, t.insert, c.parts(db, table))
	}
	// The target and its reference copy got the same rows.
	sums := make([]string, 2)
	for i, tb := range []string{table, ref} {
		s, err := c.ch("SELECT count(), sum(cityHash64(id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted)) FROM "+db+"."+tb+" FINAL", nil)
		if err != nil {
			return row, err
		}
		sums[i] = strings.TrimSpace(s)
	}
	if sums[0] != sums[1] {
		return row, fmt.Errorf("the target holds %s (count, hash), its reference %s", sums[0], sums[1])
	}
	for _, tb := range []string{table, ref} {
		if _, err := c.ch("DROP TABLE "+db+"."+tb, nil); err != nil {
			return row, err
		}
	}
	return row, nil
}

// optimize merges db.table into one part: OPTIMIZE … FINAL, retried while
// background merges hold the parts (18.16 then does nothing, silently,
// unless optimize_throw_if_noop).
func (c config) optimize(db, table string) error {
	deadline := time.Now().Add(20 * time.Minute)
	for {
		_, err := c.ch("OPTIMIZE TABLE "+db+"."+table+" FINAL", nil, "--optimize_throw_if_noop=1")
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Second)
	}
}

// parts describes db.table's active parts ("1 part", "7 parts").
func (c config) parts(db, table string) string {
	out, err := c.ch("SELECT count() FROM system.parts WHERE database = '"+db+"' AND table = '"+table+"' AND active", nil)
	if err != nil {
		return "? parts"
	}
	if n := strings.TrimSpace(out); n != "1" {
		return n + " parts"
	}
	return "1 part"
}

// randomKeys picks keys distinct ids in 1..n, in random order.
func randomKeys(n int64, keys int, seed uint64) []int64 {
	rng := rand.New(rand.NewPCG(seed, 11))
	seen := make(map[int64]bool, keys)
	ids := make([]int64, 0, keys)
	for len(ids) < keys {
		id := rng.Int64N(n) + 1
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids
}
