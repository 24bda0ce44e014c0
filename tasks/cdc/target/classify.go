package target

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/changesink/changesink/internal/outcome"
)

// ClickHouse error codes changesink acts on (src/Common/ErrorCodes.cpp),
// every one of them, by code: classify decides the class of most, the
// lock, the ledger and setup act on the missing-object ones.
const (
	chTableAlreadyExists = 57
	chUnknownTable       = 60
	chUnknownDatabase    = 81
	chFileDoesntExist    = 107
	chUnknownSetting     = 115
	chTimeoutExceeded    = 159
	chReadonly           = 164
	chUnknownUser        = 192
	chWrongPassword      = 193
	chRequiredPassword   = 194
	chTooManyQueries     = 202
	chNoFreeConnection   = 203
	chSocketTimeout      = 209
	chNetworkError       = 210
	chMemoryLimit        = 241
	chTableIsReadOnly    = 242
	chTooManyParts       = 252
	chAllReplicasLost    = 279
	chQueryIsProhibited  = 392 // DDL with allow_ddl = 0
	chAccessDenied       = 497
	chAuthFailed         = 516
	chPocoException      = 1000 // 18.16: "File not found" among others
)

// chCode is a ClickHouse exception's code in err's chain, or 0.
func chCode(err error) int32 {
	if ex, ok := chException(err); ok {
		return ex.Code
	}
	return 0
}

// hideQuery returns err with the query string and user left out of the
// URL an HTTP request's error (*url.Error) quotes: clickhouse-go sends
// CLICKHOUSE_URL's settings there, whose values changesink never shows
// (checkURLSettings). The chain under it is err's.
func hideQuery(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	clean := "<url>"
	if u, perr := url.Parse(ue.URL); perr == nil {
		u.RawQuery, u.User = "", nil
		clean = u.String()
	}
	if clean == ue.URL {
		return err
	}
	return &hiddenQuery{msg: strings.ReplaceAll(err.Error(), ue.URL, clean), err: err}
}

// hiddenQuery is an error whose text leaves a URL's query out.
type hiddenQuery struct {
	msg string
	err error
}

func (h *hiddenQuery) Error() string { return h.msg }

func (h *hiddenQuery) Unwrap() error { return h.err }

// classify marks a ClickHouse error: authentication, missing objects, a TLS
// handshake that cannot succeed and an invalid address are configuration
// errors (fix the secret or the URL, run cdc setup), load and network
// problems are transient, anything else is left to outcome.Classify.
func classify(err error) error {
	err = hideQuery(err)
	if ex, ok := chException(err); ok {
		if c, ok := classifyCluster(err, ex.Code); ok {
			return c
		}
		switch ex.Code {
		case chUnknownUser, chWrongPassword, chRequiredPassword, chAuthFailed:
			return outcome.Config.Mark(fmt.Errorf("%w (%w)", err, ErrCredentials))
		case chReadonly, chAccessDenied, chQueryIsProhibited:
			return outcome.Config.Mark(fmt.Errorf("%w (%w)", err, ErrNotAllowed))
		case chUnknownSetting:
			return outcome.Config.Mark(fmt.Errorf("%w (%w in %s's query string)", err, ErrUnknownSetting, EnvClickHouseURL))
		case chUnknownTable, chUnknownDatabase:
			return outcome.Config.Mark(fmt.Errorf("%w (%w)", err, ErrNotSetUp))
		case chMemoryLimit:
			// Other queries' memory, or a limit too low for any batch: only
			// the first passes with a retry.
			return outcome.Transient.Mark(fmt.Errorf("%w (%w)", err, ErrMemory))
		case chTimeoutExceeded, chSocketTimeout, chNetworkError, chTooManyQueries, chTooManyParts,
			chTableIsReadOnly, chAllReplicasLost, chNoFreeConnection:
			return outcome.Transient.Mark(err)
		}
		return err
	}
	switch code := httpStatus(err); {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return outcome.Config.Mark(fmt.Errorf("%w (%w)", err, ErrCredentials))
	case transientHTTPStatus(code):
		return outcome.Transient.Mark(fmt.Errorf("%w (%w)", err, ErrUnreachable))
	}
	if outcome.TLSFailure(err) {
		return outcome.Config.Mark(fmt.Errorf("%w (%w)", err, ErrTLS))
	}
	var addrErr *net.AddrError
	if errors.As(err, &addrErr) { // an invalid port or address: no retry helps
		return outcome.Config.Mark(err)
	}
	// A connection the server (or the network) closed mid-statement reads
	// EOF: the driver does not wrap it in a net.Error.
	if netError(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, clickhouse.ErrAcquireConnTimeout) {
		return outcome.Transient.Mark(fmt.Errorf("%w (%w)", err, ErrUnreachable))
	}
	return err
}
