package target

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

// probeServers are the servers the protocol probes are asked about: an
// HTTP server, a TLS listener (whose certificate no probe checks), one that
// answers with a TLS alert, one that reads and never answers (as a busy
// native server might), one that closes at once, and a closed port.
type probeServers struct{ web, tls, alert, silent, closing, closed string }

func startProbeServers(t *testing.T) probeServers {
	t.Helper()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("Ok.\n")) }))
	t.Cleanup(web.Close)
	return probeServers{
		web:   strings.TrimPrefix(web.URL, "http://"),
		tls:   testenv.ServeUntrustedTLS(t),
		alert: testenv.ServeTLSAlerts(t),
		silent: testenv.ServeLocal(t, func(c net.Conn) {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			_, _ = io.Copy(io.Discard, c) // read, never answered
		}),
		closing: testenv.ServeLocal(t, func(c net.Conn) { c.Close() }),
		closed:  testenv.ClosedAddr(t),
	}
}

// TestSpeaks: speaksHTTP recognises an HTTP server, not a server that never
// answers (as a busy native server might) nor a closed port; speaksTLS
// recognises a TLS server (whose certificate it never checks) and one that
// answers with a TLS alert, not an HTTP server, a server that never
// answers, one that closes at once nor a closed port. Each returns the
// first address of several that speaks its protocol.
func TestSpeaks(t *testing.T) {
	s := startProbeServers(t)
	probes := map[string]func(addrs []string) (string, bool){
		"HTTP": func(addrs []string) (string, bool) { return speaksHTTP(context.Background(), addrs, nil) },
		"TLS":  func(addrs []string) (string, bool) { return speaksTLS(context.Background(), addrs, time.Second) },
	}
	tests := []struct {
		probe, name string
		addrs       []string
		want        string
	}{
		{"HTTP", "http", []string{s.web}, s.web},
		{"HTTP", "silent", []string{s.silent}, ""},
		{"HTTP", "closed", []string{s.closed}, ""},
		{"HTTP", "second of two", []string{s.closed, s.web}, s.web},
		{"TLS", "tls", []string{s.tls}, s.tls},
		{"TLS", "tls alert", []string{s.alert}, s.alert},
		{"TLS", "http", []string{s.web}, ""},
		{"TLS", "silent", []string{s.silent}, ""},
		{"TLS", "closes", []string{s.closing}, ""},
		{"TLS", "closed", []string{s.closed}, ""},
		{"TLS", "second of two", []string{s.closed, s.tls}, s.tls},
	}
	for _, tt := range tests {
		t.Run(tt.probe+"/"+tt.name, func(t *testing.T) {
			got, ok := probes[tt.probe](tt.addrs)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("speaks%s = %q, %v; want %q", tt.probe, got, ok, tt.want)
			}
		})
	}
}

// TestSpeaksTLSClickHousePorts asks the real server's ports: only the
// native TLS port (tcp_port_secure) speaks TLS.
func TestSpeaksTLSClickHousePorts(t *testing.T) {
	testenv.ClickHouseHas(t, testenv.ClickHouseTLS)
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
