package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

type ordersCmd struct {
	DSN     string `env:"DEMO_PG_DSN" required:"" help:"PostgreSQL DSN of the source database (the shop database); for --capture the role needs REPLICATION."`
	Capture string `help:"Also capture this run's changes from the WAL and write them to this file as a Debezium INLINE Ion batch." type:"path"`
	Binary  bool   `help:"Write the batch as binary Ion, one binary chunk per change (Kestra 2.x); default: text Ion, one value per line (Kestra 1.x)."`
}

// Run ensures public.orders exists (REPLICA IDENTITY FULL, so deletes carry the
// whole before image) and applies one round of changes in three transactions:
// inserts of five new orders, updates of two of them (one twice in one
// transaction, so the batch holds two versions of one key), a delete of one,
// and an update of an order from an earlier round when there is one.
func (c *ordersCmd) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, ordersDDL); err != nil {
		return fmt.Errorf("create public.orders: %w", err)
	}

	var capture *walCapture
	if c.Capture != "" {
		if _, err := conn.Exec(ctx, publicationDDL); err != nil {
			return fmt.Errorf("create publication: %w", err)
		}
		if capture, err = startCapture(ctx, c.DSN); err != nil {
			return err
		}
		defer capture.close(context.WithoutCancel(ctx))
	}

	stats, target, err := changeOrders(ctx, conn)
	if err != nil {
		return err
	}
	fmt.Printf("orders: %s\n", stats)
	if capture == nil {
		return nil
	}
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		return fmt.Errorf("read database name: %w", err)
	}
	changes, err := capture.read(ctx, db, target)
	if err != nil {
		return err
	}
	if err := writeBatch(c.Capture, changes, c.Binary); err != nil {
		return err
	}
	format := "text Ion (Kestra 1.x)"
	if c.Binary {
		format = "binary Ion (Kestra 2.x)"
	}
	fmt.Printf("orders: captured %d changes from the WAL (LSN %s..%s) into %s as %s\n",
		len(changes), changes[0].LSN, changes[len(changes)-1].LSN, c.Capture, format)
	return nil
}

const ordersDDL = `
CREATE TABLE IF NOT EXISTS public.orders (
  id bigint PRIMARY KEY,
  customer_id bigint NOT NULL,
  amount_cents bigint NOT NULL,
  status text NOT NULL
);
ALTER TABLE public.orders REPLICA IDENTITY FULL;`

const (
	publicationName = "changesink_demo"
	publicationDDL  = `DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'changesink_demo') THEN
    CREATE PUBLICATION changesink_demo FOR TABLE public.orders;
  END IF;
END $$;`
)

type lsnText pglogrepl.LSN

func (l *lsnText) Scan(src any) error {
	s, ok := src.(string)
	if !ok {
		return fmt.Errorf("lsn: want text, got %T", src)
	}
	v, err := pglogrepl.ParseLSN(s)
	*l = lsnText(v)
	return err
}

// changeOrders applies one round of changes in three transactions and
// returns a summary and an LSN inside the last transaction, before its commit
// record: the capture has seen the whole round once it has seen a commit that
// ends past it. (The server's current WAL position after the round would not
// do: other sessions' WAL may follow the last commit, and pgoutput sends no
// commit for transactions outside the publication, so a capture waiting for
// that position would wait forever.)
func changeOrders(ctx context.Context, conn *pgx.Conn) (string, pglogrepl.LSN, error) {
	var base int64
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM public.orders").Scan(&base); err != nil {
		return "", 0, fmt.Errorf("read max order id: %w", err)
	}
	statuses := []string{"new", "paid", "shipped", "delivered", "cancelled"}
	inserts, updates, deletes := 0, 0, 0
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for i := int64(1); i <= 5; i++ {
			if _, err := tx.Exec(ctx, "INSERT INTO public.orders VALUES ($1, $2, $3, $4)",
				base+i, 100+i, 1000*i+99, statuses[0]); err != nil {
				return err
			}
			inserts++
		}
		return nil
	})
	if err != nil {
		return "", 0, fmt.Errorf("insert orders: %w", err)
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, u := range []struct {
			id     int64
			status string
		}{{base + 1, "paid"}, {base + 1, "shipped"}, {base + 2, "paid"}} {
			if _, err := tx.Exec(ctx, "UPDATE public.orders SET status = $2, amount_cents = amount_cents + 1 WHERE id = $1", u.id, u.status); err != nil {
				return err
			}
			updates++
		}
		if base > 0 { // an order from an earlier round
			tag, err := tx.Exec(ctx, "UPDATE public.orders SET status = 'delivered' WHERE id = (SELECT max(id) FROM public.orders WHERE id <= $1)", base)
			if err != nil {
				return err
			}
			updates += int(tag.RowsAffected())
		}
		return nil
	})
	if err != nil {
		return "", 0, fmt.Errorf("update orders: %w", err)
	}
	var last pglogrepl.LSN
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DELETE FROM public.orders WHERE id = $1", base+3); err != nil {
			return err
		}
		deletes++
		return tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan((*lsnText)(&last))
	})
	if err != nil {
		return "", 0, fmt.Errorf("delete orders: %w", err)
	}
	return fmt.Sprintf("inserted %d, updated %d, deleted %d rows of public.orders (ids %d..%d)",
		inserts, updates, deletes, base+1, base+5), last, nil
}

// walCapture reads the changes of one demo round from a temporary logical
// replication slot (pgoutput), created before the changes are made, so the slot
// sees exactly them and disappears with the connection.
type walCapture struct {
	conn  *pgconn.PgConn
	slot  string
	start pglogrepl.LSN
}

func startCapture(ctx context.Context, dsn string) (*walCapture, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse dsn: %w", err)
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open replication connection (the role needs REPLICATION): %w", err)
	}
	slot := "changesink_demo_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication})
	if err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("create temporary replication slot: %w", err)
	}
	start, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("slot consistent point %q: %w", res.ConsistentPoint, err)
	}
	return &walCapture{conn: conn, slot: slot, start: start}, nil
}

func (w *walCapture) close(ctx context.Context) { _ = w.conn.Close(ctx) }

// read streams the slot until it has seen a commit that ends past target
// (an LSN inside the round's last transaction) and returns the changes of
// public.orders in commit order.
func (w *walCapture) read(ctx context.Context, db string, target pglogrepl.LSN) ([]change, error) {
	err := pglogrepl.StartReplication(ctx, w.conn, w.slot, w.start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + publicationName + "'"},
	})
	if err != nil {
		return nil, fmt.Errorf("start replication: %w", err)
	}
	relations := map[uint32]*pglogrepl.RelationMessage{}
	var (
		out        []change
		begin      *pglogrepl.BeginMessage
		lastEnd    pglogrepl.LSN
		lastCommit *pglogrepl.LSN // WAL position of the last commit message, as Debezium's lsn_commit
		deadline   = time.Now().Add(30 * time.Second)
	)
	for lastEnd < target {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("wal capture: the last commit seen ends at %s; still waiting for the commit of the transaction at %s after 30 s", lastEnd, target)
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		msg, err := w.conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if pgconn.Timeout(err) {
				if err := pglogrepl.SendStandbyStatusUpdate(ctx, w.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: lastEnd}); err != nil {
					return nil, fmt.Errorf("standby status: %w", err)
				}
				continue
			}
			return nil, fmt.Errorf("receive wal: %w", err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			if e, ok := msg.(*pgproto3.ErrorResponse); ok {
				return nil, fmt.Errorf("replication error: %s", e.Message)
			}
			continue
		}
		switch cd.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if err != nil {
				return nil, err
			}
			if ka.ReplyRequested {
				if err := pglogrepl.SendStandbyStatusUpdate(ctx, w.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: lastEnd}); err != nil {
					return nil, fmt.Errorf("standby status: %w", err)
				}
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				return nil, err
			}
			m, err := pglogrepl.Parse(xld.WALData)
			if err != nil {
				return nil, fmt.Errorf("parse pgoutput message at %s: %w", xld.WALStart, err)
			}
			switch m := m.(type) {
			case *pglogrepl.RelationMessage:
				relations[m.RelationID] = m
			case *pglogrepl.BeginMessage:
				begin = m
			case *pglogrepl.CommitMessage:
				lastEnd = m.TransactionEndLSN
				at := xld.WALStart
				lastCommit = &at
				begin = nil
			case *pglogrepl.InsertMessage:
				ch, err := newChange(db, relations[m.RelationID], begin, xld.WALStart, lastCommit, "CREATE", m.Tuple)
				if err != nil {
					return nil, err
				}
				out = append(out, ch)
			case *pglogrepl.UpdateMessage:
				ch, err := newChange(db, relations[m.RelationID], begin, xld.WALStart, lastCommit, "UPDATE", m.NewTuple)
				if err != nil {
					return nil, err
				}
				out = append(out, ch)
			case *pglogrepl.DeleteMessage:
				ch, err := newChange(db, relations[m.RelationID], begin, xld.WALStart, lastCommit, "DELETE", m.OldTuple)
				if err != nil {
					return nil, err
				}
				out = append(out, ch)
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("wal capture: no changes of public.orders were decoded")
	}
	return out, nil
}

func newChange(db string, rel *pglogrepl.RelationMessage, begin *pglogrepl.BeginMessage, lsn pglogrepl.LSN, lastCommit *pglogrepl.LSN, op string, tuple *pglogrepl.TupleData) (change, error) {
	if rel == nil || begin == nil || tuple == nil {
		return change{}, fmt.Errorf("wal change at %s: no relation, transaction or tuple (unexpected pgoutput stream)", lsn)
	}
	ch := change{
		DB: db, Schema: rel.Namespace, Table: rel.RelationName,
		Operation: op, LSN: lsn, LastCommitLSN: lastCommit, TxID: begin.Xid, CommitTime: begin.CommitTime,
	}
	for i, col := range tuple.Columns {
		if i >= len(rel.Columns) {
			return change{}, fmt.Errorf("wal change at %s: more values than columns", lsn)
		}
		v := column{Name: rel.Columns[i].Name, Type: rel.Columns[i].DataType}
		switch col.DataType {
		case 'n':
			v.Null = true
		case 't':
			v.Text = string(col.Data)
		case 'u':
			v.Text = "__debezium_unavailable_value" // Debezium's placeholder for an unchanged TOASTed value
		default:
			return change{}, fmt.Errorf("wal change at %s: column %s: unsupported tuple format %q", lsn, v.Name, col.DataType)
		}
		ch.Columns = append(ch.Columns, v)
	}
	return ch, nil
}

func writeBatch(path string, changes []change, binary bool) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	now := time.Now()
	for i, ch := range changes {
		if err := encodeInline(f, ch, now, binary); err != nil {
			_ = f.Close()
			return fmt.Errorf("encode change %d: %w", i+1, err)
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
