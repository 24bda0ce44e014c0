package testenv

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"
)

// ExecPostgres runs statements on the PostgreSQL database dsn reaches,
// each in its own transaction; a failure ends the test.
func ExecPostgres(t testing.TB, dsn string, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// QueryPostgres returns the rows of sql on the PostgreSQL database dsn
// reaches, each row's text values tab-joined, NULL as \N.
func QueryPostgres(t testing.TB, dsn, sql string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rs, err := conn.Query(ctx, sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var cells []string
		for _, raw := range rs.RawValues() {
			if raw == nil {
				cells = append(cells, `\N`)
			} else {
				cells = append(cells, string(raw))
			}
		}
		out = append(out, strings.Join(cells, "\t"))
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// DropSlot drops the replication slot named slot through the admin
// connection adminDSN, ending the session that streams from it first,
// until it is gone or a minute passed; a failure to connect is reported,
// not fatal (it runs in cleanups).
func DropSlot(t testing.TB, adminDSN, slot string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		t.Errorf("drop slot %s: %v", slot, err)
		return
	}
	defer conn.Close(ctx)
	for {
		_, err := conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		if err == nil {
			_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		}
		if err == nil || ctx.Err() != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// QueryClickHouse returns the rows of sql (with args) on conn, each row's
// values tab-joined as fmt prints them, NULL as NULL.
func QueryClickHouse(t testing.TB, conn driver.Conn, sql string, args ...any) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer rows.Close()
	var out []string
	cols := rows.ColumnTypes()
	for rows.Next() {
		dest := make([]any, len(cols))
		for i, c := range cols {
			dest[i] = reflect.New(c.ScanType()).Interface()
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		parts := make([]string, len(dest))
		for i, d := range dest {
			parts[i] = fmt.Sprint(deref(d))
		}
		out = append(out, strings.Join(parts, "\t"))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// deref follows the pointers of p to its value, "NULL" at a nil one.
func deref(p any) any {
	v := reflect.ValueOf(p)
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "NULL"
		}
		v = v.Elem()
	}
	return v.Interface()
}
