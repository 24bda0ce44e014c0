package slot

import (
	"testing"

	"github.com/changesink/changesink/internal/testenv"
	"github.com/jackc/pgx/v5/pgconn"
)

// privateCluster starts a PostgreSQL 15 cluster of the test's own
// (testenv.PrivatePostgres), with the settings given (postgresql.conf
// lines), for what cannot be done on the shared server: a slot invalidated
// by max_slot_wal_keep_size, a server out of slots or WAL senders,
// wal_level replica. It returns a source whose admin DSN is the cluster's
// superuser on database postgres.
func privateCluster(t *testing.T, settings ...string) *source {
	t.Helper()
	c := testenv.PrivatePostgres(t, settings...)
	pg, err := pgconn.ParseConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	return &source{t: t, admin: c.Admin, dsn: c.Admin, pg: pg}
}
