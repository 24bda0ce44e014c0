package benchrun

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
)

// WithDatabase returns the postgres:// URL dsn naming database db. Its
// error does not quote dsn, which holds a password.
func WithDatabase(dsn, db string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", errors.New("the PostgreSQL DSN is not a postgres:// URL (not shown: it holds a password)")
	}
	u.Path = "/" + db
	return u.String(), nil
}

// ExecSQL runs stmts on dsn, one after another, on one connection; an
// error names the statement that failed (its first 80 characters).
func ExecSQL(ctx context.Context, dsn string, stmts ...string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, sql := range stmts {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%.80s: %w", strings.Join(strings.Fields(sql), " "), err)
		}
	}
	return nil
}
