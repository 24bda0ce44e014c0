// Command benchslot is the benchmark behind .ci/bench-slot: how fast the
// slot package reads a replication slot, against PostgreSQL's own
// decoding rate measured in the same run.
//
// It creates a database of its own with a 5-column table and a
// publication, creates a base slot, writes the changes (by default 500,000
// inserts in transactions of 10,000 rows, then 250,000 updates), and
// notes the WAL position after them. Then, -reps times, it copies the base
// slot twice (pg_copy_logical_replication_slot: both copies start where the
// base slot does, before the changes) and drains the same WAL from each,
// each in a process of its own, in alternating order:
//
//   - pg_recvlogical --start -o proto_version=1 -o publication_names=… -E
//     <end> -f /dev/null: the server decodes, pg_recvlogical writes the
//     bytes away. The server's decoding is the limit of any consumer.
//   - benchslot -drain: slot.Start and Next until the end position, every
//     message decoded into events (tuples included), then nothing done
//     with them.
//
// It prints changes/s of each, the ratio of the medians, and the machine's
// load. With -cpuprofile, the drain writes a CPU profile of the reader.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/changesink/changesink/bench/internal/benchrun"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "-drain" {
		err = drainMain(os.Args[2:])
	} else {
		err = run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-slot:", err)
		os.Exit(1)
	}
}

type config struct {
	admin      string
	inserts    int
	updates    int
	txRows     int
	reps       int
	binary     bool
	cpuprofile string
}

func run() error {
	var c config
	flag.IntVar(&c.inserts, "inserts", 500_000, "rows inserted")
	flag.IntVar(&c.updates, "updates", 250_000, "rows updated after the inserts")
	flag.IntVar(&c.txRows, "tx", 10_000, "changes per transaction")
	flag.IntVar(&c.reps, "reps", 3, "repetitions of each drain (the median is compared)")
	flag.BoolVar(&c.binary, "binary", false, "also drain with pgoutput's binary option, both ways")
	flag.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of the first drain of the slot reader here")
	flag.Parse()
	c.admin = os.Getenv("CHANGESINK_TEST_PG")
	if c.admin == "" {
		return errors.New("needs CHANGESINK_TEST_PG (source .ci/env)")
	}
	recv, err := findRecvlogical()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	changes := c.inserts + c.updates
	fmt.Printf("bench-slot: %d changes (%d inserts, %d updates) of a 5-column table in transactions of %d; %d CPUs; median of %d; load %s\n",
		changes, c.inserts, c.updates, c.txRows, runtime.NumCPU(), c.reps, benchrun.LoadAvg())

	db := fmt.Sprintf("bench_slot_%d", os.Getpid())
	dsn, err := benchrun.WithDatabase(c.admin, db)
	if err != nil {
		return err
	}
	if err := benchrun.ExecSQL(ctx, c.admin, "CREATE DATABASE "+db); err != nil {
		return err
	}
	defer func() {
		_ = benchrun.ExecSQL(context.Background(), c.admin, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
	}()
	base := db + "_base"
	defer dropSlots(c.admin, db)
	start := time.Now()
	end, err := write(ctx, dsn, base, c)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %d changes in %s; WAL to decode ends at %s\n", changes, time.Since(start).Round(time.Millisecond), end)

	modes := []bool{false}
	if c.binary {
		modes = append(modes, true)
	}
	for _, binary := range modes {
		var recvSecs, readSecs, recvCPU, readCPU []float64
		for rep := range c.reps {
			a, b := fmt.Sprintf("%s_r%d", db, rep), fmt.Sprintf("%s_s%d", db, rep)
			for _, s := range []string{a, b} {
				if err := benchrun.ExecSQL(ctx, dsn, fmt.Sprintf("SELECT pg_copy_logical_replication_slot('%s', '%s')", base, s)); err != nil {
					return err
				}
			}
			recvArgs := []string{"-d", dsn, "--slot", a, "--start", "-o", "proto_version=1", "-o", "publication_names=" + db,
				"-E", end.String(), "--no-loop", "-f", "/dev/null"}
			readArgs := []string{"-drain", "-dsn", dsn, "-slot", b, "-pub", db, "-end", end.String(), "-changes", fmt.Sprint(changes)}
			if binary {
				recvArgs = append(recvArgs, "-o", "binary=true")
				readArgs = append(readArgs, "-binary")
			}
			if rep == 0 && c.cpuprofile != "" && !binary {
				readArgs = append(readArgs, "-cpuprofile", c.cpuprofile)
			}
			order := []int{0, 1}
			if rep%2 == 1 {
				order = []int{1, 0}
			}
			for _, which := range order {
				var p benchrun.Process
				var err error
				if which == 0 {
					p, err = benchrun.Run(ctx, "", os.Environ(), recv, recvArgs...)
					recvSecs = append(recvSecs, p.Elapsed.Seconds())
				} else {
					p, err = benchrun.Run(ctx, "", os.Environ(), self, readArgs...)
					readSecs = append(readSecs, p.Elapsed.Seconds())
				}
				if err != nil {
					return err
				}
				name := "pg_recvlogical"
				if which == 1 {
					name = "slot reader"
				}
				cpu := p.State.UserTime() + p.State.SystemTime()
				if which == 0 {
					recvCPU = append(recvCPU, cpu.Seconds())
				} else {
					readCPU = append(readCPU, cpu.Seconds())
				}
				fmt.Printf("  rep %d %-15s %7.3f s %10.0f changes/s  CPU %5.2f s  peak RSS %5.1f MB  %s\n", rep+1, name,
					p.Elapsed.Seconds(), float64(changes)/p.Elapsed.Seconds(), cpu.Seconds(), float64(p.MaxRSSKiB)/1024,
					strings.TrimSpace(string(p.Output)))
			}
			for _, s := range []string{a, b} {
				if err := benchrun.ExecSQL(ctx, dsn, fmt.Sprintf("SELECT pg_drop_replication_slot('%s')", s)); err != nil {
					return err
				}
			}
		}
		format := "text"
		if binary {
			format = "binary"
		}
		r, s := median(recvSecs), median(readSecs)
		fmt.Printf("%s values: pg_recvlogical %.0f changes/s, slot reader %.0f changes/s: ratio %.2f (target >= 0.80); "+
			"client CPU per change %.2f µs vs %.2f µs; load %s\n", format, float64(changes)/r, float64(changes)/s, r/s,
			median(readCPU)/float64(changes)*1e6, median(recvCPU)/float64(changes)*1e6, benchrun.LoadAvg())
	}
	return nil
}

// write creates the table, the publication and the base slot (before the
// changes, so that it decodes them all), makes the changes and returns
// the WAL position after them.
func write(ctx context.Context, dsn, base string, c config) (slot.LSN, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	pub := conn.Config().Database
	for _, sql := range []string{
		"CREATE TABLE t (id bigint PRIMARY KEY, n int NOT NULL, label text NOT NULL, amount numeric(12,2), at timestamp)",
		"CREATE PUBLICATION " + pub + " FOR TABLE t",
		"SELECT pg_create_logical_replication_slot('" + base + "', 'pgoutput')",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return 0, fmt.Errorf("%s: %w", sql, err)
		}
	}
	for lo := 1; lo <= c.inserts; lo += c.txRows {
		hi := min(lo+c.txRows-1, c.inserts)
		if _, err := conn.Exec(ctx, `INSERT INTO t SELECT g, g % 1000, 'label ' || g, g * 1.25,
			'2026-01-01'::timestamp + g * interval '1 second' FROM generate_series($1::bigint, $2::bigint) g`, lo, hi); err != nil {
			return 0, err
		}
	}
	for lo := 1; lo <= c.updates; lo += c.txRows {
		hi := min(lo+c.txRows-1, c.updates)
		if _, err := conn.Exec(ctx, `UPDATE t SET n = n + 1, amount = amount + 0.01 WHERE id BETWEEN $1 AND $2`, lo, hi); err != nil {
			return 0, err
		}
	}
	var end string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&end); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(end)
}

// drainMain is the -drain process: it reads the slot to the end position
// and prints what it read.
func drainMain(args []string) error {
	fs := flag.NewFlagSet("drain", flag.ContinueOnError)
	dsn := fs.String("dsn", "", "database")
	slotName := fs.String("slot", "", "slot")
	pub := fs.String("pub", "", "publication")
	endText := fs.String("end", "", "stop at this WAL position")
	want := fs.Int("changes", 0, "changes expected")
	binary := fs.Bool("binary", false, "pgoutput's binary option")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	end, err := pglogrepl.ParseLSN(*endText)
	if err != nil {
		return err
	}
	pg, err := pgconn.ParseConfig(*dsn)
	if err != nil {
		return err
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	st, err := slot.Start(ctx, pg, slot.StreamConfig{Slot: *slotName, Publications: []string{*pub}, Binary: *binary})
	if err != nil {
		return err
	}
	defer st.Close()
	var changes, bytes int
	var last slot.LSN
	for {
		ev, err := st.Next(ctx)
		if err != nil {
			return err
		}
		switch ev.Kind {
		case slot.KindInsert, slot.KindUpdate, slot.KindDelete:
			changes++
			for _, v := range ev.New.Values {
				bytes += len(v.Data)
			}
		case slot.KindCommit:
			last = ev.Commit.End
		}
		if (ev.Kind == slot.KindCommit && ev.Commit.End >= end) || (ev.Kind == slot.KindKeepalive && ev.WALEnd >= end) {
			break
		}
	}
	if err := st.Confirm(ctx, last); err != nil {
		return err
	}
	if changes != *want {
		return fmt.Errorf("read %d changes, want %d", changes, *want)
	}
	fmt.Printf("%d changes, %.1f MB of values", changes, float64(bytes)/1e6)
	return nil
}

func findRecvlogical() (string, error) {
	if p, err := exec.LookPath("pg_recvlogical"); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/lib/postgresql/15/bin", "pg_recvlogical")
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("pg_recvlogical not found (PostgreSQL's client tools: .ci/postgres installs them)")
	}
	return p, nil
}

// dropSlots drops the slots the run made (their names start with db).
func dropSlots(admin, db string) {
	_ = benchrun.ExecSQL(context.Background(), admin, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
		WHERE slot_name LIKE '`+db+`\_%' AND NOT active`)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
