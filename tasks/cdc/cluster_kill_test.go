package cdc

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// The child of TestClusterExactlyOnceUnderKills: the test binary, run
// again with these set, applies one batch to the cluster target and exits
// with the run's exit code (0, or the outcome class of its error).
const (
	envClusterChild = "CDC_TEST_CLUSTER_CHILD" // the batch file
	envClusterURL   = "CDC_TEST_CLUSTER_URL"   // the replica to apply through
	envClusterDB    = "CDC_TEST_CLUSTER_DB"
	envClusterName  = "CDC_TEST_CLUSTER_NAME"
)

// clusterChild applies the batch envClusterChild names.
func clusterChild() int {
	m, err := mapping.Load(ordersMapping)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	m.Target.Database, m.Target.CreateDatabase, m.Target.Cluster = os.Getenv(envClusterDB), false, os.Getenv(envClusterName)
	dir, err := os.MkdirTemp("", "cdc-cluster-child")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	defer os.RemoveAll(dir)
	cfg := Config{Mapping: m, ClickHouse: target.ClickHouse{URL: os.Getenv(envClusterURL), Timeout: 20 * time.Second},
		BatchFile: os.Getenv(envClusterChild)}
	env := Env{Dir: kestra.Dir{Path: dir}, Log: slog.New(slog.NewTextHandler(os.Stderr, nil)), hooks: testhook.Hooks{LockTiming: testLockTiming}}
	if _, err := Apply(context.Background(), cfg, env); err != nil {
		fmt.Fprintln(os.Stderr, "apply:", err)
		return outcome.Classify(err).ExitCode()
	}
	return 0
}

// TestClusterExactlyOnceUnderKills: two workers apply the same sequence of
// batches to one target on the cluster at once, each through a replica
// picked at random for every run, as processes of their own (the test
// binary) that the test kills (SIGKILL) at random moments: while they
// decode, wait for the lock, hold it, insert, read back or record. A
// killed run, or one that failed transient (exit 3), is run again; any
// other failure fails the test. Then both replicas hold exactly the rows
// the batches give, row by row, and the same ledger: every batch once, in
// order (after a baseline row when a run of the first batch was killed
// between its insert and its ledger row).
func TestClusterExactlyOnceUnderKills(t *testing.T) {
	c := newClusterEnv(t)
	c.setup()
	const batches, keys = 12, 12
	seed := uint64(time.Now().UnixNano())
	rnd := rand.New(rand.NewPCG(seed, 25))
	t.Logf("the batches' seed: %d", seed)
	type row struct {
		customer, amount int64
		status           string
		lsn              int64
		deleted          bool
	}
	latest := map[int64]row{}
	files := make([]string, batches)
	for b := range batches {
		var events []any
		for e := range 6 {
			id := int64(1 + rnd.IntN(keys))
			r := row{customer: id * 10, amount: int64(rnd.IntN(10000)), status: []string{"new", "paid", "sent"}[rnd.IntN(3)],
				lsn: int64(1000*(b+1) + e), deleted: rnd.IntN(5) == 0}
			if r.deleted {
				r.customer, r.amount, r.status = 0, 0, ""
			}
			latest[id] = r
			events = append(events, orderEvent(id, id*10, r.amount, r.status, r.lsn, r.deleted))
		}
		files[b] = writeFile(t, fmt.Sprintf("b%d.ion", b), encode(t, b%2 == 0, events...))
	}
	var want []string
	ids := make([]int64, 0, len(latest))
	for id := range latest {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		r := latest[id]
		want = append(want, orderLine(id, r.customer, r.amount, r.status, r.lsn, r.deleted))
	}

	var mu sync.Mutex
	outcomes := map[string]int{}
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
			for b := 0; b < batches; {
				if t.Failed() {
					return
				}
				replica := rnd.IntN(2)
				cmd := exec.Command(os.Args[0])
				cmd.Env = append(os.Environ(), envClusterChild+"="+files[b], envClusterURL+"="+c.cl.Replicas[replica],
					envClusterDB+"="+c.db, envClusterName+"="+c.cl.Name)
				out := &testenv.LockedBuffer{}
				cmd.Stdout, cmd.Stderr = out, out
				if err := cmd.Start(); err != nil {
					t.Error(err)
					return
				}
				kill := rnd.IntN(3) != 0 // two runs in three are killed
				if kill {
					time.AfterFunc(time.Duration(rnd.IntN(1200))*time.Millisecond, func() { _ = cmd.Process.Kill() })
				}
				err := cmd.Wait()
				code := cmd.ProcessState.ExitCode()
				what := "applied"
				switch {
				case err == nil:
					b++
				case code == -1:
					what = "killed"
				case code == outcome.Transient.ExitCode():
					what = "transient"
				default:
					t.Errorf("worker %d, batch %d through r%d: exit %d:\n%s", w, b, replica+1, code, out.String())
					return
				}
				mu.Lock()
				outcomes[what]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("runs: %v", outcomes)
	c.sameOnEveryReplica(want)
	var ledgers [2][]string
	for i := range c.conns {
		ledgers[i] = c.onReplica(i, "SELECT seq, kind, digest FROM "+c.db+".orders_cdc_ledger ORDER BY seq")
		// A run of the first batch killed after its insert and before
		// its ledger row leaves the target's rows with an empty ledger:
		// the next run starts the ledger with a baseline row (as over a
		// target the seed flow filled), then records the batch as a
		// replay. Every batch once, in order, after it.
		rows := ledgers[i]
		if len(rows) > 0 && strings.HasPrefix(rows[0], "1\tbaseline\t") {
			rows = rows[1:]
		}
		if len(rows) != batches {
			t.Errorf("replica r%d ledger: %d batch rows, want %d (every batch once):\n%s", i+1, len(rows), batches, strings.Join(ledgers[i], "\n"))
		}
		first := len(ledgers[i]) - len(rows) + 1
		digests := map[string]bool{}
		for n, l := range rows {
			f := strings.Split(l, "\t")
			if f[0] != fmt.Sprint(first+n) || f[1] != "batch" || digests[f[2]] {
				t.Errorf("replica r%d ledger row %d: %s", i+1, first+n, l)
			}
			digests[f[2]] = true
		}
	}
	if !slices.Equal(ledgers[0], ledgers[1]) {
		t.Errorf("the replicas' ledgers differ:\n%s\n--\n%s", strings.Join(ledgers[0], "\n"), strings.Join(ledgers[1], "\n"))
	}
	if outcomes["killed"] == 0 {
		t.Errorf("no run was killed (%v): the test proved nothing about kills", outcomes)
	}
}
