package target

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/changesink/changesink/internal/outcome"
)

// TestClassifyOverHTTP: an error that reached changesink over the HTTP
// interface is classified as the same error over the native protocol: the
// *clickhouse.Exception clickhouse-go wraps in an *HTTPError, and the
// exception text of a server before 19.x that clickhouse-go leaves
// unparsed; a proxy's status without an exception by its status.
func TestClassifyOverHTTP(t *testing.T) {
	legacy := func(status int, text string) error {
		return &clickhouse.HTTPError{StatusCode: status, Err: fmt.Errorf("response body: %q", text)}
	}
	for _, tc := range []struct {
		name string
		err  error
		kind outcome.Kind
		is   error
		code int32
	}{
		{"native exception", &clickhouse.Exception{Code: 60, Message: "Unknown table"}, outcome.Config, ErrNotSetUp, 60},
		{"exception in an HTTPError", &clickhouse.HTTPError{StatusCode: 404, Err: &clickhouse.Exception{Code: 60}}, outcome.Config, ErrNotSetUp, 60},
		{"18.16's unparsed exception text", legacy(404, "Code: 81, e.displayText() = DB::Exception: Database nosuch doesn't exist, e.what() = DB::Exception\n"),
			outcome.Config, ErrNotSetUp, 81},
		{"18.16's memory limit", legacy(500, "Code: 241, e.displayText() = DB::Exception: Memory limit (for query) exceeded, e.what() = DB::Exception\n"),
			outcome.Transient, ErrMemory, 241},
		{"wrong password over HTTP", &clickhouse.HTTPError{StatusCode: 403, Err: &clickhouse.Exception{Code: 516}}, outcome.Config, ErrCredentials, 516},
		{"a proxy's 401", legacy(401, "<html>Unauthorized</html>"), outcome.Config, ErrCredentials, 0},
		{"a proxy's 503", legacy(503, "<html>Service Unavailable</html>"), outcome.Transient, ErrUnreachable, 0},
		{"a proxy's 502", legacy(502, "Bad Gateway"), outcome.Transient, ErrUnreachable, 0},
		{"a 404 without an exception", legacy(404, "no such path"), outcome.Internal, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := classify(fmt.Errorf("read x: %w", tc.err))
			if got := outcome.Classify(err); got != tc.kind {
				t.Errorf("class %v, want %v: %v", got, tc.kind, err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v does not wrap %v", err, tc.is)
			}
			if got := chCode(err); got != tc.code {
				t.Errorf("chCode = %d, want %d", got, tc.code)
			}
		})
	}
}

// TestParseDSNHTTPS: https:// asks for TLS without secure=true (which
// clickhouse-go would demand), keeps an explicit secure=false's refusal,
// and leaves the other schemes alone.
func TestParseDSNHTTPS(t *testing.T) {
	for _, tc := range []struct {
		dsn      string
		http     bool
		tls, err bool
	}{
		{"https://ch.example:8443/db", true, true, false},
		{"https://ch.example:8443/db?secure=true", true, true, false},
		{"https://ch.example:8443/db?secure=false", true, false, true},
		{"http://ch.example:8123/db", true, false, false},
		{"clickhouse://ch.example:9000/db", false, false, false},
		{"clickhouse://ch.example:9440/db?secure=true", false, true, false},
	} {
		opts, err := parseDSN(tc.dsn)
		if (err != nil) != tc.err {
			t.Errorf("%s: error %v, want error %v", tc.dsn, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		if (opts.Protocol == clickhouse.HTTP) != tc.http || (opts.TLS != nil) != tc.tls {
			t.Errorf("%s: protocol %v, TLS %v; want HTTP %v, TLS %v", tc.dsn, opts.Protocol, opts.TLS != nil, tc.http, tc.tls)
		}
	}
}

// TestNetErrorThroughURLError: a request's failure that net/http wraps in
// a *url.Error (a net.Error itself) counts as a network error only when
// what it wraps is one, as the same failure over the native protocol.
func TestNetErrorThroughURLError(t *testing.T) {
	opErr := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a reset over native", fmt.Errorf("read: %w", opErr), true},
		{"a reset over HTTP", fmt.Errorf("read: %w", &url.Error{Op: "Post", URL: "http://x", Err: opErr}), true},
		{"a closed connection over native", fmt.Errorf("read: %w", io.EOF), false},
		{"a closed connection over HTTP", fmt.Errorf("read: %w", &url.Error{Op: "Post", URL: "http://x", Err: io.EOF}), false},
		{"two causes, one a reset", fmt.Errorf("%w (%w)", errors.New("x"), opErr), true},
	} {
		if got := netError(tc.err); got != tc.want {
			t.Errorf("%s: netError = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestClassifyHidesTheURLsSettings: a request's failure over HTTP quotes
// the request's URL, where clickhouse-go puts CLICKHOUSE_URL's settings;
// the classified error keeps the host and drops the settings and user.
func TestClassifyHidesTheURLsSettings(t *testing.T) {
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	err := classify(fmt.Errorf("insert: %w", &url.Error{Op: "Post",
		URL: "http://u:pw@ch.example:8123/?max_execution_time=7&some_token=s3cret-value&query=INSERT", Err: opErr}))
	if msg := err.Error(); strings.Contains(msg, "s3cret-value") || strings.Contains(msg, "pw@") || !strings.Contains(msg, "ch.example:8123") {
		t.Errorf("classified error %q: want the host, not the settings or the user", msg)
	}
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("classified error %v is not ErrUnreachable", err)
	}
}
