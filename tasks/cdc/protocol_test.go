package cdc

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/testenv"
)

// TestSpeaksHTTP: an HTTP server is recognised; a server that never answers
// (as a busy native server might) and a closed port are not.
func TestSpeaksHTTP(t *testing.T) {
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("Ok.\n")) }))
	defer web.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	webAddr := strings.TrimPrefix(web.URL, "http://")

	tests := []struct {
		name  string
		addrs []string
		want  string
	}{
		{"http", []string{webAddr}, webAddr},
		{"silent", []string{silent.Addr().String()}, ""},
		{"closed", []string{closedAddr}, ""},
		{"second of two", []string{closedAddr, webAddr}, webAddr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := speaksHTTP(context.Background(), tt.addrs, nil)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("speaksHTTP = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}

// TestSpeaksTLS: a TLS server (whose certificate the probe never checks) and
// one that answers with a TLS alert are recognised; an HTTP server, a server
// that never answers, one that closes at once and a closed port are not.
func TestSpeaksTLS(t *testing.T) {
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("Ok.\n")) }))
	defer web.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Serve(t, silent, func(c net.Conn) {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		_, _ = io.Copy(io.Discard, c) // read, never answered
	})
	closing, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Serve(t, closing, func(c net.Conn) { c.Close() })
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	tlsAddr, alertAddr := tlsServer(t), alertServer(t)

	tests := []struct {
		name  string
		addrs []string
		want  string
	}{
		{"tls", []string{tlsAddr}, tlsAddr},
		{"tls alert", []string{alertAddr}, alertAddr},
		{"http", []string{strings.TrimPrefix(web.URL, "http://")}, ""},
		{"silent", []string{silent.Addr().String()}, ""},
		{"closes", []string{closing.Addr().String()}, ""},
		{"closed", []string{closedAddr}, ""},
		{"second of two", []string{closedAddr, tlsAddr}, tlsAddr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := speaksTLS(context.Background(), tt.addrs, time.Second)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("speaksTLS = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}

// TestSpeaksTLSClickHousePorts asks the real server's ports: only the
// native TLS port (tcp_port_secure) speaks TLS.
func TestSpeaksTLSClickHousePorts(t *testing.T) {
	vars := testenv.Lookup(t, "CHANGESINK_TEST_CLICKHOUSE", "CHANGESINK_TEST_CLICKHOUSE_SECURE", "CHANGESINK_TEST_CLICKHOUSE_HTTP")
	host := func(raw string) string {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return u.Host
	}
	for _, tt := range []struct {
		name, addr string
		want       bool
	}{
		{"native", host(vars["CHANGESINK_TEST_CLICKHOUSE"]), false},
		{"native TLS", host(vars["CHANGESINK_TEST_CLICKHOUSE_SECURE"]), true},
		{"http", vars["CHANGESINK_TEST_CLICKHOUSE_HTTP"], false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, got := speaksTLS(context.Background(), []string{tt.addr}, 10*time.Second); got != tt.want {
				t.Errorf("speaksTLS(%s) = %v, want %v", tt.addr, got, tt.want)
			}
		})
	}
}
