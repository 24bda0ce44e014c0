package pgvalue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/changesink/changesink/internal/testenv"
)

// edgeDB creates a database of the test's own holding the table edge: id
// integer PRIMARY KEY, then one column c<i> of cases[i].pg per case, and a
// publication p of it. It returns the database's URL.
func edgeDB(t *testing.T, ctx context.Context, cases []textCase, opts testenv.DatabaseOptions) string {
	t.Helper()
	admin := testenv.Lookup(t, "CHANGESINK_TEST_PG")["CHANGESINK_TEST_PG"]
	dsn := testenv.CreateDatabaseWith(t, admin, testenv.UniqueName(t, "pgv_"), opts)
	cols := []string{"id integer PRIMARY KEY"}
	for i, c := range cases {
		cols = append(cols, fmt.Sprintf("c%d %s", i, c.pg))
	}
	exec(t, ctx, dsn, nil, "CREATE TABLE edge ("+strings.Join(cols, ", ")+")", "CREATE PUBLICATION p FOR TABLE edge")
	return dsn
}

// insertEdge inserts row id holding every case's literal.
func insertEdge(t *testing.T, ctx context.Context, dsn string, cases []textCase, id int) {
	t.Helper()
	lits := []string{fmt.Sprint(id)}
	for _, c := range cases {
		lits = append(lits, c.lit)
	}
	exec(t, ctx, dsn, Settings(), "INSERT INTO edge VALUES ("+strings.Join(lits, ", ")+")")
}

// exec runs statements on a connection with the startup parameters params.
func exec(t *testing.T, ctx context.Context, dsn string, params map[string]string, sqls ...string) {
	t.Helper()
	conn := connect(t, ctx, dsn, params)
	defer conn.Close(ctx)
	for _, s := range sqls {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%.60s: %v", s, err)
		}
	}
}

func connect(t *testing.T, ctx context.Context, dsn string, params map[string]string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return conn
}

// selectTexts reads every case column of row id as its type's output
// function prints it: the text a simple query returns, which is what
// pgoutput sends (c::text is not: a cast to text prints a boolean as
// true and drops a char(n)'s padding).
func selectTexts(t *testing.T, ctx context.Context, conn *pgx.Conn, n, id int) []string {
	t.Helper()
	cols := make([]string, n)
	for i := range cols {
		cols[i] = fmt.Sprintf("c%d", i)
	}
	res, err := conn.PgConn().Exec(ctx, fmt.Sprintf("SELECT %s FROM edge WHERE id = %d", strings.Join(cols, ", "), id)).ReadAll()
	if err != nil || len(res) != 1 || len(res[0].Rows) != 1 {
		t.Fatalf("select the texts: %v", err)
	}
	texts := make([]string, n)
	for i, b := range res[0].Rows[0] {
		texts[i] = string(b)
	}
	return texts
}

// TestServerText: PostgreSQL prints every case's value (its type's output
// function, as a simple query returns it) exactly as the case says (so TestText reads real output), the Relation's OIDs and typmods
// are those sourceColumn gives, and the printed text converts as the case
// wants; a timestamptz printed under other time zones (offsets of half
// hours, 13:45, and local mean times with seconds) converts to the same
// value.
func TestServerText(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := edgeDB(t, ctx, textCases, testenv.DatabaseOptions{})
	insertEdge(t, ctx, dsn, textCases, 1)
	conn := connect(t, ctx, dsn, Settings())
	defer conn.Close(ctx)

	rows, err := conn.Query(ctx, "SELECT attname, atttypid, atttypmod FROM pg_attribute WHERE attrelid = 'edge'::regclass AND attnum > 1 ORDER BY attnum")
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for rows.Next() {
		var name string
		var oid uint32
		var mod int32
		if err := rows.Scan(&name, &oid, &mod); err != nil {
			t.Fatal(err)
		}
		if want := sourceColumn(t, name, textCases[i].pg); oid != want.TypeOID || mod != want.TypeMod {
			t.Errorf("%s (%s): pg_attribute says OID %d typmod %d, sourceColumn %d %d", textCases[i].name, textCases[i].pg, oid, mod, want.TypeOID, want.TypeMod)
		}
		i++
	}
	if rows.Err() != nil || i != len(textCases) {
		t.Fatalf("read %d columns of %d: %v", i, len(textCases), rows.Err())
	}

	ds := caseDecoders(t, textCases)
	for i, text := range selectTexts(t, ctx, conn, len(textCases), 1) {
		c := textCases[i]
		if text != c.text {
			t.Errorf("%s: PostgreSQL prints %s as a %s as %q, the case says %q", c.name, c.lit, c.pg, text, c.text)
		}
		checkCase(t, c, ds[i], []byte(text))
	}

	for _, zone := range []string{"Asia/Kolkata", "America/Sao_Paulo", "Europe/Amsterdam", "Pacific/Chatham", "America/St_Johns", "Etc/GMT+12"} {
		if _, err := conn.Exec(ctx, "SET TimeZone = '"+zone+"'"); err != nil {
			t.Fatal(err)
		}
		texts := selectTexts(t, ctx, conn, len(textCases), 1)
		zoned := 0
		for i, c := range textCases {
			if c.pg != "timestamptz" {
				continue
			}
			zoned++
			checkCase(t, textCase{name: c.name + " in " + zone, want: c.want, err: c.err}, ds[i], []byte(texts[i]))
		}
		if zoned < 10 {
			t.Fatalf("only %d timestamptz cases", zoned)
		}
	}
}

// replicationConn opens a replication connection (replication=database)
// with the startup parameters params and reads the settings
// CheckSettings needs with SHOW.
func replicationConn(t *testing.T, ctx context.Context, dsn string, params map[string]string) (*pgconn.PgConn, map[string]string) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "database"
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("replication connection: %v", err)
	}
	t.Cleanup(func() { closeReplication(t, conn, dsn) })
	shown := map[string]string{}
	for _, name := range append(CheckedSettings, "TimeZone") {
		res, err := conn.Exec(ctx, "SHOW "+name).ReadAll()
		if err != nil || len(res) != 1 || len(res[0].Rows) != 1 {
			t.Fatalf("SHOW %s on a replication connection: %v", name, err)
		}
		shown[name] = string(res[0].Rows[0][0])
	}
	return conn, shown
}

// closeReplication closes a replication connection and waits until its
// walsender is gone with its temporary slots: a database with a slot cannot
// be dropped, and the walsender ends a moment after the connection.
func closeReplication(t *testing.T, conn *pgconn.PgConn, dsn string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pid := conn.PID()
	conn.Close(ctx)
	check, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Errorf("wait for the walsender to end: %v", err)
		return
	}
	defer check.Close(ctx)
	for {
		var n int
		err := check.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n)
		if err != nil || n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("the walsender %d did not end", pid)
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// streamInsert creates a temporary pgoutput slot on conn, inserts row id
// (through another connection) and returns the Relation and the Insert
// pgoutput streams for it.
func streamInsert(t *testing.T, ctx context.Context, conn *pgconn.PgConn, dsn string, cases []textCase, id int) (*pglogrepl.RelationMessage, *pglogrepl.InsertMessage) {
	t.Helper()
	slot := "pgv_" + testenv.RandomHex(6)
	if _, err := pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{Temporary: true}); err != nil {
		t.Fatalf("create the slot: %v", err)
	}
	insertEdge(t, ctx, dsn, cases, id)
	err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'p'"}})
	if err != nil {
		t.Fatalf("start replication: %v", err)
	}
	var rel *pglogrepl.RelationMessage
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 || cd.Data[0] != pglogrepl.XLogDataByteID {
			continue
		}
		x, err := pglogrepl.ParseXLogData(cd.Data[1:])
		if err != nil {
			t.Fatal(err)
		}
		m, err := pglogrepl.Parse(x.WALData)
		if err != nil {
			t.Fatal(err)
		}
		switch m := m.(type) {
		case *pglogrepl.RelationMessage:
			rel = m
		case *pglogrepl.InsertMessage:
			if rel == nil {
				t.Fatal("an Insert before its Relation")
			}
			return rel, m
		}
	}
}

// hostile are database settings under which values print otherwise:
// TestWalsenderText shows they reach a walsender, and that the startup
// parameters of Settings override them.
var hostile = []string{"DateStyle = 'SQL, DMY'", "TimeZone = 'America/Sao_Paulo'", "extra_float_digits = 0",
	"bytea_output = 'escape'", "IntervalStyle = 'sql_standard'"}

// TestWalsenderText: pgoutput prints values with the walsender's
// settings. Those of ALTER DATABASE … SET reach it (a date streams as
// 29/02/2024, a double rounded to 15 digits: CheckSettings refuses them);
// the startup parameters Settings gives win over them, and then every
// case streams as the text TestServerText reads, and converts as the case
// wants. With TimeZone set to a zone whose old offsets have seconds, the
// timestamptz values still convert to the same instants.
func TestWalsenderText(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := edgeDB(t, ctx, textCases, testenv.DatabaseOptions{})
	db := dsn[strings.LastIndex(dsn, "/")+1:]
	if i := strings.IndexByte(db, '?'); i >= 0 {
		db = db[:i]
	}
	for _, s := range hostile {
		exec(t, ctx, dsn, nil, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" SET "+s)
	}
	ds := caseDecoders(t, textCases)

	t.Run("the database's settings", func(t *testing.T) {
		conn, shown := replicationConn(t, ctx, dsn, nil)
		if err := CheckSettings(shown); !errors.Is(err, ErrSettings) {
			t.Fatalf("CheckSettings(%v) = %v, want ErrSettings", shown, err)
		}
		_, ins := streamInsert(t, ctx, conn, dsn, textCases, 1)
		saw := 0
		for i, c := range textCases {
			got := string(ins.Tuple.Columns[i+1].Data)
			switch c.name {
			case "date":
				saw++
				if got != "29/02/2024" {
					t.Errorf("date under DateStyle SQL, DMY: %q", got)
				}
				if _, err := ds[i].Text([]byte(got)); !errors.Is(err, ErrNotText) {
					t.Errorf("date %q: got %v, want ErrNotText", got, err)
				}
			case "double 17 digits":
				saw++
				if got != "0.3" {
					t.Errorf("double under extra_float_digits 0: %q", got)
				}
			case "bytea":
				saw++
				if _, err := ds[i].Text([]byte(got)); !errors.Is(err, ErrNotText) {
					t.Errorf("bytea %q under bytea_output escape: got %v, want ErrNotText", got, err)
				}
			}
		}
		if saw != 3 {
			t.Fatalf("saw %d of the 3 cases", saw)
		}
	})

	for _, zone := range []string{"UTC", "America/Sao_Paulo"} {
		t.Run("startup parameters, TimeZone "+zone, func(t *testing.T) {
			params := Settings()
			params["TimeZone"] = zone
			conn, shown := replicationConn(t, ctx, dsn, params)
			if err := CheckSettings(shown); err != nil || shown["TimeZone"] != zone {
				t.Fatalf("the startup parameters did not win: %v (%v)", err, shown)
			}
			id := 2
			if zone != "UTC" {
				id = 3
			}
			rel, ins := streamInsert(t, ctx, conn, dsn, textCases, id)
			if len(rel.Columns) != len(textCases)+1 || rel.Columns[0].Flags != 1 {
				t.Fatalf("the Relation: %d columns, the first with flags %d", len(rel.Columns), rel.Columns[0].Flags)
			}
			for i, c := range textCases {
				rc, tc := rel.Columns[i+1], ins.Tuple.Columns[i+1]
				if want := sourceColumn(t, rc.Name, c.pg); rc.DataType != want.TypeOID || rc.TypeModifier != want.TypeMod || rc.Flags != 0 {
					t.Errorf("%s: the Relation says OID %d typmod %d flags %d", c.name, rc.DataType, rc.TypeModifier, rc.Flags)
				}
				if tc.DataType != 't' {
					t.Errorf("%s: streamed as %q", c.name, tc.DataType)
					continue
				}
				if zone == "UTC" && string(tc.Data) != c.text {
					t.Errorf("%s: streamed %q, SELECT prints %q", c.name, tc.Data, c.text)
				}
				got, err := ds[i].Value(tc.DataType, tc.Data)
				if c.err != nil {
					if !isRefusal(err, c.err) {
						t.Errorf("%s: streamed %q: got %+v, %v; want %v", c.name, tc.Data, got, err, c.err)
					}
				} else if err != nil || !got.Equal(c.want) {
					t.Errorf("%s: streamed %q: got %+v, %v; want %+v", c.name, tc.Data, got, err, c.want)
				}
			}
		})
	}
}

// TestWalsenderEncoding: a LATIN1 database streams text in its own
// encoding unless the connection asks for UTF8 (Settings does): Latin-1
// bytes are not UTF-8, and are refused (ErrNotText), as CheckSettings
// refuses the setting.
func TestWalsenderEncoding(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cases := []textCase{{name: "latin", pg: "text", lit: "'café'", text: "café", col: "String", want: sv("café")}}
	dsn := edgeDB(t, ctx, cases, testenv.DatabaseOptions{Encoding: "LATIN1"})
	ds := caseDecoders(t, cases)
	for _, tt := range []struct {
		encoding string
		wantErr  error
	}{{"UTF8", nil}, {"LATIN1", ErrNotText}} {
		params := Settings()
		params["client_encoding"] = tt.encoding
		conn, shown := replicationConn(t, ctx, dsn, params)
		if err := CheckSettings(shown); (err == nil) != (tt.wantErr == nil) {
			t.Errorf("client_encoding %s: CheckSettings = %v", tt.encoding, err)
		}
		_, ins := streamInsert(t, ctx, conn, dsn, cases, len(tt.encoding))
		got, err := ds[0].Value(ins.Tuple.Columns[1].DataType, ins.Tuple.Columns[1].Data)
		switch {
		case tt.wantErr != nil && !isRefusal(err, tt.wantErr):
			t.Errorf("client_encoding %s: streamed %q: got %+v, %v; want %v", tt.encoding, ins.Tuple.Columns[1].Data, got, err, tt.wantErr)
		case tt.wantErr == nil && (err != nil || got.S != "café"):
			t.Errorf("client_encoding %s: streamed %q: got %+v, %v", tt.encoding, ins.Tuple.Columns[1].Data, got, err)
		}
	}
}
