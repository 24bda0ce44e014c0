package target

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
)

// ClickHouse's HTTP interface: CLICKHOUSE_URL may be http://host:8123/db or
// https://host:8443/db (some managed services expose only HTTPS) as well as
// the native clickhouse://host:9000/db. clickhouse-go speaks both; what
// differs is how a failure reaches changesink, which this file evens out so
// that classify decides the same whichever protocol carried it.

// parseDSN is clickhouse.ParseDSN, with https:// asking for TLS by itself:
// clickhouse-go refuses an https URL without secure=true ("https without
// TLS"), which says nothing to someone who wrote https.
func parseDSN(dsn string) (*clickhouse.Options, error) {
	if u, err := url.Parse(dsn); err == nil && u.Scheme == "https" {
		q := u.Query()
		if !q.Has("secure") {
			q.Set("secure", "true")
			u.RawQuery = q.Encode()
			dsn = u.String()
		}
	}
	return clickhouse.ParseDSN(dsn)
}

// legacyHTTPException matches the text of an exception as servers before
// 19.x write it in an HTTP error response ("Code: 60, e.displayText() =
// DB::Exception: Table x doesn't exist., e.what() = DB::Exception"), which
// clickhouse-go, expecting "Code: 60. DB::Exception: ...", leaves unparsed.
var legacyHTTPException = regexp.MustCompile(`^\s*Code: (\d+), e\.displayText\(\) = ([A-Za-z:]*Exception): `)

// chException returns the ClickHouse exception in err's chain: over the
// native protocol a *clickhouse.Exception; over HTTP clickhouse-go wraps
// it in a *clickhouse.HTTPError (errors.As finds it through Unwrap), or,
// for an error body it cannot parse (an old server's), leaves the text,
// whose code this recovers.
func chException(err error) (*clickhouse.Exception, bool) {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		return ex, true
	}
	var he *clickhouse.HTTPError
	if !errors.As(err, &he) || he.Err == nil {
		return nil, false
	}
	text := he.Err.Error()
	if unq, uerr := strconv.Unquote(strings.TrimPrefix(text, "response body: ")); uerr == nil {
		text = unq
	}
	m := legacyHTTPException.FindStringSubmatch(text)
	if m == nil {
		return nil, false
	}
	code, cerr := strconv.ParseInt(m[1], 10, 32)
	if cerr != nil {
		return nil, false
	}
	return &clickhouse.Exception{Code: int32(code), Name: m[2], Message: text[len(m[0]):]}, true
}

// chUnknownFunction is UNKNOWN_FUNCTION: over HTTP, clickhouse-go's hello
// asks displayName(), which servers before 20.x lack.
const chUnknownFunction = 46

// httpConnectErr classifies a failed first query over HTTP: clickhouse-go's
// hello (SELECT displayName(), version(), revision(), timezone()), which
// carries CLICKHOUSE_URL's settings. A server too old for it (18.16 lacks
// displayName()) is refused as a configuration error: its native protocol
// works; a setting it refuses, as probeURLSettings would.
func httpConnectErr(err error, settings clickhouse.Settings) error {
	if chCode(err) == chUnknownFunction {
		return outcome.Config.Mark(fmt.Errorf("%w: %w: %s: it has no displayName(), which ClickHouse 20.x added: %w",
			change.ErrConfig, ErrHTTPTooOld, EnvClickHouseURL, err))
	}
	return settingsRefused(classify(err), settings, "the server")
}

// netError reports a net.Error in err's chain, looking through the
// *url.Error net/http wraps a request's failure in (itself a net.Error,
// whatever it wraps): so a connection the server closed (io.EOF) is what it
// is over the native protocol, not "unreachable" because HTTP carried it.
func netError(err error) bool {
	switch e := err.(type) {
	case nil:
		return false
	case *url.Error:
		return netError(e.Err)
	case net.Error:
		return true
	case interface{ Unwrap() []error }:
		for _, x := range e.Unwrap() {
			if netError(x) {
				return true
			}
		}
		return false
	}
	return netError(errors.Unwrap(err))
}

// httpStatus returns the status of an HTTP error response that carried no
// ClickHouse exception (a proxy's or load balancer's answer in front of the
// server), or 0.
func httpStatus(err error) int {
	var he *clickhouse.HTTPError
	if _, isCH := chException(err); isCH || !errors.As(err, &he) {
		return 0
	}
	return he.StatusCode
}

// transientHTTPStatus reports the statuses a proxy answers while the server
// behind it is away, restarting or overloaded: a retry may pass.
func transientHTTPStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}
