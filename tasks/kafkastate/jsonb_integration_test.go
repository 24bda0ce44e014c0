package kafkastate

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/changesink/changesink/internal/testenv"
)

// edgeNumbers are JSON numbers at the edges of PostgreSQL's numeric
// input: a zero mantissa lets an exponent grow far past what a float64
// overflows at, up to numeric_in's limit (|exponent| < INT_MAX/2).
var edgeNumbers = []string{
	"0e1073741822", "0e1073741823", "0e1073741824", "0e99999999999", "-0E+1073741823",
	"0.0e1073741822", "0.000e1073741823", "0e-1073741822", "0e00000000000000000001",
	"1e-16383", "0.0e-16383", "0.5e-16383", "9e131071", "1e308", "1e309",
}

// TestNumbersAgreeWithJSONB: for every edge number, the validator
// accepts exactly what PostgreSQL's jsonb input accepts, except where the
// seed's float refuses first (overflow to inf: ErrNonFinite).
func TestNumbersAgreeWithJSONB(t *testing.T) {
	vars := testenv.Lookup(t, "CHANGESINK_TEST_PG")
	ctx := testCtx(t, time.Minute)
	conn, err := pgx.Connect(ctx, vars["CHANGESINK_TEST_PG"])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, n := range edgeNumbers {
		var ignored string
		pgErr := conn.QueryRow(ctx, `SELECT CAST($1 AS text)::jsonb::text`, n).Scan(&ignored)
		var pe *pgconn.PgError
		if pgErr != nil && !errors.As(pgErr, &pe) {
			t.Fatalf("jsonb %s: %v", n, pgErr)
		}
		verr := validateValue([]byte(n))
		if errors.Is(verr, ErrNonFinite) {
			continue // the seed refuses it too
		}
		if (pgErr == nil) != (verr == nil) {
			t.Errorf("%s: jsonb error %v, validator %v; they must agree", n, pgErr, verr)
		}
	}
}
