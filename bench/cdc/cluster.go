package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// clusterCost is -cluster: the cost of replication (docs/design/
// clickhouse-cluster.md). In one run, on replica r1 of the test cluster
// (.ci/clickhouse-cluster), it times changesink cdc apply of the batch
// into a target on r1 alone (ReplacingMergeTree, no target.cluster) and
// into a target on the cluster (Replicated, ON CLUSTER, every write a
// quorum insert of both replicas, every read sequentially consistent),
// alternately, best of -reps; and, as the physical reference measured the
// same way, a raw clickhouse-client INSERT of the final rows into a plain
// table of r1 and into a Replicated one with insert_quorum=2. It prints the
// ratios and checks that every table holds the same rows on both replicas.
func (c config) clusterCost(cluster, r1, r2 string) error {
	files, err := generate(c)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	on1, err := clientFor(r1)
	if err != nil {
		return err
	}
	on2, err := clientFor(r2)
	if err != nil {
		return err
	}
	c.chURL, c.client = r1, on1
	db := fmt.Sprintf("bench_cl_%d", os.Getpid())
	if _, err := c.ch("CREATE DATABASE "+db+" ON CLUSTER "+cluster, nil); err != nil {
		return err
	}
	defer c.ch("DROP DATABASE IF EXISTS "+db+" ON CLUSTER "+cluster, nil)

	best := map[string]result{}
	keep := func(name string, r result) {
		if b, ok := best[name]; !ok || r.seconds < b.seconds {
			best[name] = r
		}
	}
	const one, onCluster, rawOne, rawQuorum = "one", "cluster", "raw one", "raw quorum"
	for rep := range c.reps {
		for _, mode := range []string{one, onCluster} {
			table := fmt.Sprintf("%s_%d", strings.Fields(mode)[0], rep)
			r, err := c.clusterApply(db, table, files.binary, map[string]string{one: "", onCluster: cluster}[mode])
			if err != nil {
				return fmt.Errorf("changesink (%s): %w", mode, err)
			}
			keep(mode, r)
		}
		r, err := c.rawInsert(db, fmt.Sprintf("raw_%d", rep), files.tsv)
		if err != nil {
			return err
		}
		keep(rawOne, r)
		r, err = c.rawQuorumInsert(db, fmt.Sprintf("rawq_%d", rep), files.tsv, cluster)
		if err != nil {
			return err
		}
		keep(rawQuorum, r)
	}
	for _, row := range []struct{ name, label string }{
		{one, "changesink cdc apply, one server (r1)"},
		{onCluster, "changesink cdc apply, cluster (r1 + r2, quorum)"},
		{rawOne, "raw INSERT of the final rows, one server"},
		{rawQuorum, "raw INSERT, Replicated, insert_quorum=2"},
	} {
		r := best[row.name]
		timers := ""
		if r.timers != nil {
			tm := r.timers
			rest := tm["duration"] - tm["decode"] - tm["read_current"] - tm["insert"] - tm["verify"]
			timers = fmt.Sprintf("  decode %.3f, read %.3f, insert %.3f, verify %.3f, the rest (lock, ledger) %.3f s",
				tm["decode"], tm["read_current"], tm["insert"], tm["verify"], rest)
		}
		fmt.Printf("  %-50s %8.3f s %10.0f events/s%s\n", row.label, r.seconds, float64(c.events)/r.seconds, timers)
	}

	// Every table, on both replicas (the plain ones on r1, where they are).
	sums := map[string][]string{}
	for i, client := range [][]string{on1, on2} {
		cc := c
		cc.client = client
		tables, err := cc.ch("SELECT name FROM system.tables WHERE database = '"+db+"' AND engine LIKE '%MergeTree' ORDER BY name", nil)
		if err != nil {
			return err
		}
		for _, t := range strings.Fields(tables) {
			if strings.HasSuffix(t, "_ledger") || strings.HasSuffix(t, "_lock") {
				continue // changesink's ledgers and cluster locks
			}
			sum, err := cc.ch("SELECT count(), sum(cityHash64(id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted)) FROM "+db+"."+t+" FINAL", nil)
			if err != nil {
				return err
			}
			sums[strings.TrimSpace(sum)] = append(sums[strings.TrimSpace(sum)], fmt.Sprintf("r%d:%s", i+1, t))
		}
	}
	if len(sums) != 1 {
		return fmt.Errorf("the tables differ: %v", sums)
	}
	for s, ts := range sums {
		fmt.Printf("all %d tables hold the same %s rows (count, hash): %s\n", len(ts), strings.Replace(s, "\t", ", ", 1), strings.Join(ts, " "))
	}
	fmt.Println("ratios (the cost of replication: time on the cluster / time on one server):")
	fmt.Printf("  changesink cdc apply:  %5.2fx\n", best[onCluster].seconds/best[one].seconds)
	fmt.Printf("  raw INSERT (physical): %5.2fx\n", best[rawQuorum].seconds/best[rawOne].seconds)
	for _, step := range []string{"decode", "read_current", "insert", "verify"} {
		if o := best[one].timers[step]; o > 0 {
			fmt.Printf("  changesink's %-12s %5.2fx\n", step+":", best[onCluster].timers[step]/o)
		}
	}
	return nil
}

// clientFor is clickhouse-client's command for the server of a
// clickhouse:// URL.
func clientFor(dsn string) ([]string, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Port() == "" {
		return nil, errors.New("a replica's URL is not a clickhouse://host:port URL (not shown: it may hold a password)")
	}
	return []string{"clickhouse-client", "--host", u.Hostname(), "--port", u.Port()}, nil
}

// clusterApply sets up db.table with the shipped orders mapping, naming
// cluster when not "", and times cdc apply of batch into it.
func (c config) clusterApply(db, table, batch, cluster string) (result, error) {
	dir, err := os.MkdirTemp(c.dir, "cl-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	mapping, err := c.mapping(dir, db, table)
	if err != nil {
		return result{}, err
	}
	if cluster != "" {
		raw, err := os.ReadFile(mapping)
		if err != nil {
			return result{}, err
		}
		m := strings.Replace(string(raw), "  live_view: "+table+"_live\n", "  live_view: "+table+"_live\n  cluster: "+cluster+"\n", 1)
		if m == string(raw) {
			return result{}, fmt.Errorf("no live_view line in %s", mapping)
		}
		if err := os.WriteFile(mapping, []byte(m), 0o644); err != nil {
			return result{}, err
		}
	}
	env := append(os.Environ(), "WORKING_DIR="+dir, "CDC_MAPPING="+mapping, "CLICKHOUSE_URL="+c.chURL, "CDC_BATCH_FILE="+batch)
	if out, err := execIn(dir, env, nil, c.bin, "cdc", "setup"); err != nil {
		return result{}, fmt.Errorf("setup: %v\n%s", err, out)
	}
	return c.apply(dir, env)
}

// rawQuorumInsert is rawInsert into a Replicated table made ON CLUSTER,
// with insert_quorum=2.
func (c config) rawQuorumInsert(db, table, tsv, cluster string) (result, error) {
	path := filepath.Join("/clickhouse/tables/{shard}", db, table)
	if _, err := c.ch("CREATE TABLE "+db+"."+table+" ON CLUSTER "+cluster+" (id Int64, customer_id Int64, amount_cents Int64, status String, "+
		"_cdc_lsn UInt64, _cdc_deleted UInt8) ENGINE = ReplicatedReplacingMergeTree('"+path+"', '{replica}', _cdc_lsn) ORDER BY id", nil); err != nil {
		return result{}, err
	}
	return c.timedInsert(db, table, tsv, "--insert_quorum=2")
}

// timedInsert times a clickhouse-client INSERT of the TSV file into
// db.table, with the client settings given.
func (c config) timedInsert(db, table, tsv string, settings ...string) (result, error) {
	f, err := os.Open(tsv)
	if err != nil {
		return result{}, err
	}
	defer f.Close()
	start := time.Now()
	if _, err := c.ch("INSERT INTO "+db+"."+table+" FORMAT TSV", f, settings...); err != nil {
		return result{}, err
	}
	return result{seconds: time.Since(start).Seconds(), note: "process start included"}, nil
}
