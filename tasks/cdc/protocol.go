package cdc

import (
	"bytes"
	"context"
	"crypto/tls"
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
	for _, addr := range addrs {
		if probeHTTP(ctx, addr, tlsConfig) {
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
