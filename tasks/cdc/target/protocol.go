package target

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"time"
)

// wrongProtocolAfter is how long connect waits for the server's hello before
// it checks whether the address speaks HTTP instead of the native protocol.
const wrongProtocolAfter = 3 * time.Second

// speaksHTTP reports the first of addrs that answers an HTTP request (over
// TLS when tlsConfig is set) with an HTTP status line, within a few seconds.
// It is asked only when the native hello is slow, so a healthy native server
// never sees the request (a native server would log it as a bad packet).
func speaksHTTP(ctx context.Context, addrs []string, tlsConfig *tls.Config) (string, bool) {
	return firstThatAnswers(addrs, func(addr string) bool { return probeHTTP(ctx, addr, tlsConfig) })
}

// firstThatAnswers returns the first of addrs for which probe is true.
func firstThatAnswers(addrs []string, probe func(addr string) bool) (string, bool) {
	for _, addr := range addrs {
		if probe(addr) {
			return addr, true
		}
	}
	return "", false
}

func probeHTTP(ctx context.Context, addr string, tlsConfig *tls.Config) bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	d := net.Dialer{}
	var conn net.Conn
	var err error
	if tlsConfig != nil {
		conn, err = (&tls.Dialer{NetDialer: &d, Config: tlsConfig}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return false
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("GET /ping HTTP/1.0\r\n\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 5)
	n, _ := conn.Read(buf)
	return bytes.Equal(buf[:n], []byte("HTTP/"))
}

// errSawTLS stops a TLS probe's handshake at the server's certificate.
var errSawTLS = errors.New("the server answered the TLS client hello")

// speaksTLS reports the first of addrs whose server answers a TLS client
// hello as a TLS server does: with its ServerHello and certificate, or with
// a TLS alert; each address is given timeout (within ctx). It is asked only
// after a plaintext native hello failed, to tell a TLS port (CLICKHOUSE_URL
// without secure=true) from a server that dropped the connection. The probe
// is never used for anything else: its handshake is stopped when the
// server's certificate arrives, which is neither checked nor trusted, and
// nothing but the TLS client hello is sent, no credentials.
func speaksTLS(ctx context.Context, addrs []string, timeout time.Duration) (string, bool) {
	return firstThatAnswers(addrs, func(addr string) bool { return probeTLS(ctx, addr, timeout) })
}

func probeTLS(ctx context.Context, addr string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	cfg := &tls.Config{
		ServerName: host,
		// Any version and certificate: the probe asks only whether the
		// server speaks TLS, and VerifyConnection ends every handshake
		// (before the client's Finished) whatever the server sent.
		MinVersion:         tls.VersionTLS10,
		InsecureSkipVerify: true,
		VerifyConnection:   func(tls.ConnectionState) error { return errSawTLS },
	}
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	if err == nil { // VerifyConnection refuses every handshake
		conn.Close()
		return true
	}
	// crypto/tls reports an alert the server sent as a *net.OpError with
	// Op "remote error" (as outcome.TLSFailure reads it); a dial error has
	// Op "dial", bytes that are not TLS a tls.RecordHeaderError.
	var op *net.OpError
	return errors.Is(err, errSawTLS) || (errors.As(err, &op) && op.Op == "remote error")
}
