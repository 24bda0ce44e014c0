package slot

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// readBuffer is the replication connection's read buffer.
const readBuffer = 256 << 10

// connect opens a connection to pg's database: a replication connection
// (replication=database: it speaks the replication commands and simple
// SQL) when replication is set. The role's lack of the REPLICATION
// attribute is ErrNoReplication; a server at max_wal_senders is
// ErrNoSenderRoom.
func connect(ctx context.Context, pg *pgconn.Config, replication bool) (*pgconn.PgConn, error) {
	cfg := pg.Copy()
	if replication {
		cfg.RuntimeParams["replication"] = "database"
		// pgproto3 reads at most 8 KiB per read(2): a stream of 100-byte
		// messages costs a system call per 80 of them. A larger buffer
		// below it takes what the socket holds in one.
		cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
			return pgproto3.NewFrontend(bufio.NewReaderSize(r, readBuffer), w)
		}
	} else {
		delete(cfg.RuntimeParams, "replication")
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn, nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgerrcode.InsufficientPrivilege:
			if replication { // the server's error alone: the connect error repeats the address and user
				return nil, configErr(fmt.Errorf("open a replication connection as %s: %w: %w", pg.User, ErrNoReplication, pgErr))
			}
		case pgerrcode.TooManyConnections:
			if replication {
				return nil, transient(fmt.Errorf("open a replication connection: %w: %w", ErrNoSenderRoom, pgErr))
			}
		}
	}
	what := "connect to PostgreSQL"
	if replication {
		what = "open a replication connection"
	}
	return nil, fmt.Errorf("%s: %w", what, err)
}

// closeConn closes conn within a short time of its own: a close is
// cleanup, whatever ended the caller's context.
func closeConn(conn *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = conn.Close(ctx)
}
