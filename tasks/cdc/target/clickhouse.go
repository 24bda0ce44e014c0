package target

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/redact"
)

// The env contract of the ClickHouse settings (cmd/changesink reads them
// and fills a ClickHouse; this package never reads the environment).
const (
	EnvClickHouseURL      = "CLICKHOUSE_URL"         // ClickHouse.URL
	EnvClickHouseUsername = "CLICKHOUSE_USERNAME"    // ClickHouse.Username
	EnvClickHousePassword = "CLICKHOUSE_PASSWORD"    // ClickHouse.Password
	EnvClickHouseCAFile   = "CLICKHOUSE_CA_FILE"     // ClickHouse.CAFile
	EnvClickHouseTimeout  = "CDC_CLICKHOUSE_TIMEOUT" // ClickHouse.Timeout
)

const (
	// DefaultTimeout bounds each ClickHouse call when ClickHouse.Timeout
	// is 0.
	DefaultTimeout = 2 * time.Minute
	// minTimeout is the shortest ClickHouse.Timeout: a shorter one would
	// fail every call, as transient, which no retry helps.
	MinTimeout = time.Second
)

// ClickHouse is how to reach the target server.
type ClickHouse struct {
	// URL is a clickhouse-go DSN, on the native protocol, e.g.
	// clickhouse://host:9000/default?secure=true (TLS) &dial_timeout=10s,
	// or on the HTTP interface: http://host:8123/default, or
	// https://host:8443/default (TLS without secure=true: http.go).
	URL string
	// Username and Password override the DSN's credentials when not empty.
	Username, Password string
	// CAFile is a PEM file of the CA certificates that may sign the
	// server's certificate (CLICKHOUSE_CA_FILE), for a server whose
	// certificate is not from a CA in the system's trust store. It needs
	// secure=true in URL; the system trust store is then not used. Empty:
	// the system trust store (which SSL_CERT_FILE and SSL_CERT_DIR replace).
	CAFile string
	// Timeout bounds each call: connecting, each query, the insert; 0 is
	// DefaultTimeout.
	Timeout time.Duration
	// Conns is the most connections open at once; under 3, 3.
	Conns int
}

// Database is the database URL names, as the driver reads it (its path,
// or a database= setting): "" when it names none or does not parse (the
// connection says why).
func (c ClickHouse) Database() string {
	o, err := parseDSN(c.URL)
	if err != nil {
		return ""
	}
	return o.Auth.Database
}

// target is a connection to the target table of a mapping.
type Server struct {
	conn    driver.Conn
	M       *mapping.Mapping
	Caps    mapping.ServerCaps
	Version string
	timeout time.Duration
	// opts is how Connect reached the server; cl is the target's cluster
	// once ensureCluster found it (cluster.go), nil for one server.
	opts *clickhouse.Options
	cl   *clusterInfo
}

// table is the target table as checkSchema found it: the connection and,
// for each mapped column (in mapping order), how it is stored.
type Table struct {
	*Server
	cols []storedColumn
	// shown: per mapped column, the last Date (days) or DateTime (Unix
	// seconds) the server shows in it, 0 for no limit (LastShown).
	shown []uint64
	// isDeleted: the engine is ReplacingMergeTree(version, deleted), whose
	// FINAL hides the delete markers changesink's own reads need
	// (deleted.go).
	isDeleted bool
}

// storedColumn is a mapped column as the target table stores it.
type storedColumn struct {
	// typ is the stored type in ClickHouse's spelling (a Bool column made
	// on a server before 21.12 is UInt8).
	typ string
	// codec moves values between the canonical form and clickhouse-go.
	codec codec
}

// connect opens and pings the server and learns its version. Connection
// failures are transient; a bad URL, refused credentials and a TLS port
// without secure=true (speaksTLS) are config errors.
func Connect(ctx context.Context, cfg ClickHouse, m *mapping.Mapping) (*Server, error) {
	opts, err := parseDSN(cfg.URL)
	if err != nil {
		// The URL itself is left out: it may hold a password that a URL
		// that does not parse keeps from redaction.
		msg := strings.ReplaceAll(err.Error(), cfg.URL, "<url>")
		if redact.JDBCURL(cfg.URL) {
			msg = "it is a JDBC URL, as the seed flow's"
		}
		return nil, outcome.Config.Mark(fmt.Errorf("%w: %w: %s is not a clickhouse-go DSN (%s)", change.ErrConfig, ErrBadURL, EnvClickHouseURL, msg))
	}
	// debug=true would have the driver print its own lines to stdout,
	// which in Kestra mode holds protocol lines only, and log what
	// changesink keeps out of logs: it is ignored (the deprecated fields
	// are the ones ParseDSN sets).
	//lint:ignore SA1019 ParseDSN still sets Debug from the URL
	opts.Debug, opts.Debugf, opts.Logger = false, nil, nil
	if cfg.CAFile != "" {
		if opts.TLS == nil {
			return nil, outcome.Config.Mark(fmt.Errorf("%w: %s is set but %s does not ask for TLS; "+
				"add secure=true and use the server's TLS port (9440 by default), or use https://", change.ErrConfig, EnvClickHouseCAFile, EnvClickHouseURL))
		}
		pool, err := loadCAFile(cfg.CAFile)
		if err != nil {
			return nil, err
		}
		opts.TLS.RootCAs = pool
	}
	if cfg.Username != "" {
		opts.Auth.Username = cfg.Username
	}
	if cfg.Password != "" {
		opts.Auth.Password = cfg.Password
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if opts.DialTimeout == 0 || opts.DialTimeout > timeout {
		opts.DialTimeout = min(timeout, 30*time.Second)
	}
	if opts.ReadTimeout == 0 || opts.ReadTimeout > timeout {
		opts.ReadTimeout = timeout
	}
	// A query, the insert or a read, and the lock's heartbeat; a run that
	// holds more locks (cdc sync, one per target) asks for more.
	opts.MaxOpenConns = max(3, cfg.Conns)
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, classify(fmt.Errorf("open ClickHouse %s: %w", strings.Join(opts.Addr, ","), err))
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// clickhouse-go dials and reads the server's hello under its dial
	// timeout, not the context; a stopped run (SIGTERM) does not wait it out.
	pinged := make(chan error, 1)
	go func() { pinged <- conn.Ping(cctx) }()
	// A native server answers the hello in milliseconds. When it has not
	// after wrongProtocolAfter, ask whether the address speaks HTTP: the
	// HTTP interface waits for the end of a request the hello never sends,
	// so the run would otherwise wait out the whole timeout.
	slow := time.NewTimer(wrongProtocolAfter)
	defer slow.Stop()
	var perr error
	for waiting := true; waiting; {
		select {
		case perr = <-pinged:
			waiting = false
		case <-slow.C:
			if opts.Protocol != clickhouse.Native {
				continue // http(s)://: its own client reports an address that does not answer HTTP
			}
			if addr, ok := SpeaksHTTP(cctx, opts.Addr, opts.TLS); ok {
				go func() { <-pinged; conn.Close() }()
				return nil, httpPortErr(addr)
			}
		case <-cctx.Done():
			go func() { <-pinged; conn.Close() }()
			return nil, classify(fmt.Errorf("connect to ClickHouse %s: %w", strings.Join(opts.Addr, ","), cctx.Err()))
		}
	}
	if perr != nil {
		conn.Close()
		err := fmt.Errorf("connect to ClickHouse %s: %w", strings.Join(opts.Addr, ","), perr)
		// A reset, close or foreign bytes, as a server going away might
		// cause: ask what the address speaks, so that a wrong port is not
		// retried for ever. The HTTP interface may
		// answer the hello at once (a length byte of 10, '\n', ends its
		// request line: a user name or password of 10 bytes), before the
		// slow probe above; a TLS port resets, closes or sends an alert.
		if ctx.Err() == nil && opts.Protocol == clickhouse.Native && mayBeTLSPort(perr) {
			if addr, ok := SpeaksHTTP(cctx, opts.Addr, opts.TLS); ok {
				return nil, httpPortErr(addr)
			}
			if opts.TLS == nil {
				if addr, ok := SpeaksTLS(cctx, opts.Addr, opts.DialTimeout); ok {
					return nil, outcome.Config.Mark(fmt.Errorf("%w: %w: %s has no secure=true, but %s speaks TLS: %w",
						change.ErrConfig, ErrTLS, EnvClickHouseURL, addr, err))
				}
			}
		}
		if opts.Protocol == clickhouse.HTTP {
			return nil, httpConnectErr(err, opts.Settings)
		}
		return nil, classify(err)
	}
	sv, err := conn.ServerVersion()
	if err != nil {
		conn.Close()
		return nil, classify(fmt.Errorf("read the ClickHouse server version: %w", err))
	}
	if err := checkURLSettings(opts.Settings, sv); err != nil {
		conn.Close()
		return nil, err
	}
	if err := probeURLSettings(cctx, conn, opts.Settings, sv.Version.String()); err != nil {
		conn.Close()
		return nil, err
	}
	s := &Server{
		conn:    conn,
		M:       m,
		Caps:    mapping.CapsFor(sv.Version.Major, sv.Version.Minor),
		Version: sv.Version.String(),
		timeout: timeout,
		opts:    opts,
	}
	if err := s.dateRange(cctx); err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

// dateRange asks the server which Dates and DateTimes it shows: 18.16
// reads the top of their ranges back as 1970 (mapping.ServerCaps).
func (t *Server) dateRange(ctx context.Context) error {
	var date, dateTime uint16
	if err := t.conn.QueryRow(ctx, "SELECT toUInt16(toYear(toDate(65535))), toUInt16(toYear(toDateTime(4294967295, 'UTC')))").Scan(&date, &dateTime); err != nil {
		return classify(fmt.Errorf("read the server's date range: %w", err))
	}
	if date != 2149 {
		t.Caps.DateDays = mapping.ShortDateDays
	}
	if dateTime != 2106 {
		t.Caps.DateTimeSeconds = mapping.ShortDateTimeSeconds
	}
	return nil
}

// With returns the server for the mapping m: the same connections (Close
// the Server Connect returned, once), another target.
func (t *Server) With(m *mapping.Mapping) *Server {
	c := *t
	c.M = m
	return &c
}

func (t *Server) Close() { t.conn.Close() }

// settingsAsStrings is DBMS_MIN_REVISION_WITH_SETTINGS_SERIALIZED_AS_STRINGS:
// clickhouse-go sends query settings as text only to servers past it (19.x);
// to this one and older ones each is an unsigned number.
const settingsAsStrings = 54429

// checkURLSettings refuses, before any query, a setting from CLICKHOUSE_URL's
// query string that the server cannot take: before 19.x a setting is an
// unsigned number, so clickhouse-go fails the first query on a text value
// and a negative number garbles it (the server then reports an unknown
// setting without a name). The value is not shown: it may be a secret.
func checkURLSettings(settings clickhouse.Settings, sv *driver.ServerVersion) error {
	if sv.Revision > settingsAsStrings {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		switch v := settings[k].(type) {
		case bool:
			continue
		case int:
			if v >= 0 {
				continue
			}
		}
		return outcome.Config.Mark(fmt.Errorf("%w: %s sets the ClickHouse setting %s to a value ClickHouse %s cannot take "+
			"(before 19.x: a whole number of at least 0, or true or false)", change.ErrConfig, EnvClickHouseURL, k, sv.Version))
	}
	return nil
}

// loadCAFile reads CLICKHOUSE_CA_FILE: at least one PEM certificate.
func loadCAFile(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, outcome.Config.Mark(fmt.Errorf("%w: %s: %w", change.ErrConfig, EnvClickHouseCAFile, err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, outcome.Config.Mark(fmt.Errorf("%w: %s: no PEM certificate in %s", change.ErrConfig, EnvClickHouseCAFile, path))
	}
	return pool, nil
}

// httpPortErr refuses a CLICKHOUSE_URL that names the HTTP interface.
func httpPortErr(addr string) error {
	return outcome.Config.Mark(fmt.Errorf("%w: %w: %s points at %s, which answers as ClickHouse's HTTP interface",
		change.ErrConfig, ErrBadURL, EnvClickHouseURL, addr))
}

// mayBeTLSPort reports a failed plaintext connection that a TLS port would
// cause: the server reset or closed the connection, or answered with bytes
// that are not a native packet. An answer from ClickHouse (an exception),
// a refused connection, a timeout and the run's own stop are not.
func mayBeTLSPort(err error) bool {
	var ex *clickhouse.Exception
	var netErr net.Error
	switch {
	case errors.As(err, &ex), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case errors.As(err, &netErr) && netErr.Timeout():
		return false
	}
	return true
}

// checkSupported returns ErrUnsupportedServer, a configuration error, for
// a mapping the server cannot store.
func (t *Server) CheckSupported() error {
	for i := range t.M.Cols {
		c := &t.M.Cols[i]
		if c.Type.Kind == mapping.KindDateTime64 && !t.Caps.DateTime64 {
			return outcome.Config.Mark(fmt.Errorf("%w: column %q is %s, but ClickHouse %s has no DateTime64 (20.1 or newer has)",
				change.ErrUnsupportedServer, c.Name, c.Type, t.Version))
		}
		if c.Type.Kind == mapping.KindDecimal && c.Type.Prec > 38 && !t.Caps.Decimal256 {
			return outcome.Config.Mark(fmt.Errorf("%w: column %q is %s, but ClickHouse %s has no Decimal of more than 38 digits (21.6 or newer has)",
				change.ErrUnsupportedServer, c.Name, c.Type, t.Version))
		}
	}
	return nil
}

// exec runs one statement with the call timeout.
func (t *Server) exec(ctx context.Context, sql string) error {
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	if err := t.conn.Exec(cctx, sql); err != nil {
		return classify(fmt.Errorf("ClickHouse: %s: %w", firstLine(sql), err))
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// checkSchema compares the target table with the mapping: a
// ReplacingMergeTree holding every mapped column with its type, the UInt64
// version and the UInt8 delete marker. It returns the table as stored: each
// column's stored type and codec (a Bool column may be stored as UInt8).
func (t *Server) CheckSchema(ctx context.Context) (*Table, error) {
	if err := t.ensureCluster(ctx); err != nil {
		return nil, err
	}
	m := t.M
	obj, err := t.inspect(ctx, m.Target.Table)
	if err != nil {
		return nil, err
	}
	name, cols := obj.name, obj.cols
	engine, engineFull, sortingKey := obj.engine, obj.engineFull, obj.sortingKey
	if !obj.found {
		return nil, outcome.Config.Mark(fmt.Errorf("%w: table %s does not exist; run changesink cdc setup first", change.ErrTargetMismatch, name))
	}
	if engine != "ReplacingMergeTree" && engine != "ReplicatedReplacingMergeTree" {
		return nil, outcome.Config.Mark(fmt.Errorf("%w: %s is a %s, not a ReplacingMergeTree", change.ErrTargetMismatch, name, engine))
	}
	if err := t.checkReplicated(name, engine); err != nil {
		return nil, err
	}
	v, del := ReplacingArgs(engineFull)
	if v != m.Target.VersionColumn {
		return nil, outcome.Config.Mark(fmt.Errorf("%w: %s is versioned by %q, the mapping's version column is %q", change.ErrTargetMismatch, name, v, m.Target.VersionColumn))
	}
	if del != "" && del != m.Target.DeletedColumn {
		return nil, outcome.Config.Mark(fmt.Errorf("%w: %s drops the rows marked in %q, the mapping's delete column is %q", change.ErrTargetMismatch, name, del, m.Target.DeletedColumn))
	}
	if got, want := NormKey(sortingKey), NormKey(strings.Join(m.Key, ",")); got != want {
		return nil, outcome.Config.Mark(fmt.Errorf("%w: %s is ordered by (%s), the mapping's key is %s", change.ErrTargetMismatch, name, sortingKey, m.KeyNames()))
	}
	types := make(map[string]string, len(cols))
	for _, c := range cols {
		types[c.name] = c.typ
	}
	mismatch := func(col, want, got string) error {
		if got == "" {
			return outcome.Config.Mark(fmt.Errorf("%w: %s has no column %q (%s)", change.ErrTargetMismatch, name, col, want))
		}
		return outcome.Config.Mark(fmt.Errorf("%w: column %s.%q is %s, the mapping says %s", change.ErrTargetMismatch, name, col, got, want))
	}
	tbl := &Table{Server: t, cols: make([]storedColumn, len(m.Cols)), isDeleted: del != ""}
	for i := range m.Cols {
		c := &m.Cols[i]
		got := types[c.Name]
		if !c.Type.SameType(got) {
			return nil, mismatch(c.Name, c.Type.DDL(t.Caps), got)
		}
		asUInt8 := c.Type.Kind == mapping.KindBool && strings.Contains(got, "UInt8")
		cd, err := codecFor(c, asUInt8)
		if err != nil {
			return nil, err
		}
		tbl.cols[i] = storedColumn{typ: c.Type.DDL(mapping.ServerCaps{BoolType: !asUInt8}), codec: cd}
	}
	if got := types[m.Target.VersionColumn]; got != "UInt64" {
		return nil, mismatch(m.Target.VersionColumn, "UInt64", got)
	}
	if got := types[m.Target.DeletedColumn]; got != "UInt8" {
		return nil, mismatch(m.Target.DeletedColumn, "UInt8", got)
	}
	if err := tbl.lastShown(ctx); err != nil {
		return nil, err
	}
	return tbl, nil
}

// checkView checks that the live view is a view showing the mapped
// columns, in order: CREATE VIEW IF NOT EXISTS keeps an existing object, so
// a view made before a column was added (or a table of that name) would
// otherwise pass as "in place" without it.
func (t *Server) checkView(ctx context.Context) error {
	obj, err := t.inspect(ctx, t.M.Target.LiveView)
	if err != nil {
		return err
	}
	return t.checkViewObject(obj)
}

// checkViewObject is checkView of the live view as inspect found it.
func (t *Server) checkViewObject(obj object) error {
	m := t.M
	name, engine, cols := obj.name, obj.engine, obj.cols
	got := make([]string, len(cols))
	for i, c := range cols {
		got[i] = c.name
	}
	want := make([]string, len(m.Cols))
	for i := range m.Cols {
		want[i] = m.Cols[i].Name
	}
	drop := "drop it (DROP TABLE " + name + ") and re-run changesink cdc setup"
	if engine != "View" {
		return outcome.Config.Mark(fmt.Errorf("%w: the live view %s is a %s, not a view; %s", change.ErrTargetMismatch, name, engine, drop))
	}
	if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		return outcome.Config.Mark(fmt.Errorf("%w: the live view %s shows the columns (%s), the mapping has (%s); %s",
			change.ErrTargetMismatch, name, strings.Join(got, ", "), strings.Join(want, ", "), drop))
	}
	return nil
}

// ensureView makes the live view when no table or view has its name, and
// checks it (checkView); made says it was missing.
func (t *Server) EnsureView(ctx context.Context) (made bool, err error) {
	obj, err := t.inspect(ctx, t.M.Target.LiveView)
	switch {
	case err != nil:
		return false, err
	case obj.found:
		return false, t.checkViewObject(obj)
	}
	if err := t.exec(ctx, t.ddl(CreateViewSQL(t.M))); err != nil {
		return false, err
	}
	return true, t.checkView(ctx)
}

// normKey normalises a sorting key for comparison: no spaces, quotes or
// parentheses.
func NormKey(s string) string {
	return strings.NewReplacer(" ", "", "`", "", "\"", "", "(", "", ")", "").Replace(s)
}

// setup creates (if absent) the target database when the mapping asks, the
// ReplacingMergeTree table (an existing one is checked against the mapping
// before the view is made over it), the live view and the ledger, checks
// them, and returns the statements it ran, in order.
func (t *Server) Setup(ctx context.Context) ([]string, error) {
	if err := t.ensureCluster(ctx); err != nil {
		return nil, err
	}
	if err := t.pingReplicas(ctx); err != nil {
		return nil, err
	}
	m := t.M
	var stmts []string
	if m.Target.CreateDatabase {
		stmts = append(stmts, t.ddl(CreateDatabaseSQL(m)))
	}
	if err := t.checkOrphanLedger(ctx); err != nil {
		return nil, err
	}
	table := t.ddl(CreateTableSQL(m, t.Caps))
	stmts = append(stmts, table, t.ddl(CreateViewSQL(m)), t.ddl(CreateLedgerSQL(m)))
	stmts = append(stmts, t.clusterSetupSQL()...)
	for _, s := range stmts {
		if err := t.exec(ctx, s); err != nil {
			if chCode(err) == chUnknownDatabase {
				// Not "run cdc setup first": this is setup.
				return nil, outcome.Config.Mark(fmt.Errorf("%w: %s: create it (CREATE DATABASE %s), or set "+
					"target.create_database: true in the mapping so that setup creates it", change.ErrNoDatabase,
					mapping.QuoteIdent(m.Target.Database), mapping.QuoteIdent(m.Target.Database)))
			}
			return nil, err
		}
		// An existing table is checked before the view is created over it:
		// a missing column would otherwise fail the view with ClickHouse's
		// "Unknown identifier" instead of ErrTargetMismatch naming it.
		if s == table {
			if _, err := t.CheckSchema(ctx); err != nil {
				return nil, err
			}
		}
	}
	if err := t.checkView(ctx); err != nil {
		return nil, err
	}
	if err := t.checkLedger(ctx); err != nil {
		return nil, err
	}
	if err := t.checkReplicas(ctx); err != nil {
		return nil, err
	}
	return stmts, nil
}

// AddColumns adds the mapping's columns the table lacks (columns the
// source added), each after the mapped columns before it, and makes the
// live view again over them; it returns the table as checkSchema then
// finds it. The view is missing for the moment between its DROP and its
// CREATE (18.16 has no CREATE OR REPLACE VIEW).
func (t *Server) AddColumns(ctx context.Context) (*Table, error) {
	m := t.M
	obj, err := t.inspect(ctx, m.Target.Table)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, c := range obj.cols {
		have[c.name] = true
	}
	name := mapping.Qualified(m.Target.Database, m.Target.Table)
	for i, c := range m.Cols {
		if have[c.Name] {
			continue
		}
		sql := "ALTER TABLE " + name + " ADD COLUMN " + mapping.QuoteIdent(c.Name) + " " + c.Type.DDL(t.Caps)
		if i > 0 {
			sql += " AFTER " + mapping.QuoteIdent(m.Cols[i-1].Name)
		}
		if err := t.exec(ctx, sql); err != nil {
			return nil, err
		}
	}
	if err := t.exec(ctx, t.ddl("DROP TABLE IF EXISTS "+mapping.Qualified(m.Target.Database, m.Target.LiveView))); err != nil {
		return nil, err
	}
	if err := t.exec(ctx, t.ddl(CreateViewSQL(m))); err != nil {
		return nil, err
	}
	return t.CheckSchema(ctx)
}

// lastShown sets t.shown on a server that shows less than it stores
// (Caps.DateDays, Caps.DateTimeSeconds: 18.16). The last DateTime shown
// depends on the column's time zone (18.16.1: 2106-02-06 23:59:59 UTC in
// UTC, 2106-02-05 23:59:59 UTC in America/Los_Angeles, 2106-02-06
// 14:59:59 UTC in Asia/Tokyo), so it is asked per zone: the last second
// of the range's last four days whose year the server shows as 2106.
func (t *Table) lastShown(ctx context.Context) error {
	if t.Caps.DateDays == 0 && t.Caps.DateTimeSeconds == 0 {
		return nil
	}
	const span = 4 * 86400
	t.shown = make([]uint64, len(t.M.Cols))
	zones := map[string]uint64{}
	for i, c := range t.M.Cols {
		switch c.Type.Kind {
		case mapping.KindDate:
			t.shown[i] = t.Caps.DateDays
		case mapping.KindDateTime:
			zone := c.Type.Zone()
			last, ok := zones[zone]
			if !ok {
				conv := "toDateTime(s)"
				if zone != "" {
					conv = "toDateTime(s, " + quoteString(zone) + ")"
				}
				cctx, cancel := context.WithTimeout(ctx, t.timeout)
				err := t.conn.QueryRow(cctx, "SELECT toUInt64(max(s)) FROM (SELECT toUInt32(4294967295 - number) AS s FROM system.numbers LIMIT "+
					strconv.Itoa(span)+") WHERE toYear("+conv+") >= 2106").Scan(&last)
				cancel()
				if err != nil {
					return classify(fmt.Errorf("read the last DateTime the server shows in zone %q: %w", zone, err))
				}
				last = max(last, 4294967295-span)
				zones[zone] = last
			}
			t.shown[i] = last
		}
	}
	return nil
}

// LastShown is, per mapped column, the last Date (days since 1970-01-01)
// or DateTime (Unix seconds) the server shows in it; nil or 0: no limit.
func (t *Table) LastShown() []uint64 { return t.shown }
