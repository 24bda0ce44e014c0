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
	// MinTimeout is the shortest ClickHouse.Timeout: a shorter one would
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

// Server is a connection to the ClickHouse server of a mapping's target (M);
// With gives another target on the same connections.
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

// Connect opens and pings the server and learns its version. Connection
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
			if addr, ok := speaksHTTP(cctx, opts.Addr, opts.TLS); ok {
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
			if addr, ok := speaksHTTP(cctx, opts.Addr, opts.TLS); ok {
				return nil, httpPortErr(addr)
			}
			if opts.TLS == nil {
				if addr, ok := speaksTLS(cctx, opts.Addr, opts.DialTimeout); ok {
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

// Close closes the connections.
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
