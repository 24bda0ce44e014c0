package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/amazon-ion/ion-go/ion"
	"github.com/jackc/pglogrepl"
)

// change is one decoded WAL change of a captured table.
type change struct {
	DB, Schema, Table string
	Operation         string // Debezium's enum name: CREATE, UPDATE, DELETE
	// LSN is the WAL position of the change record itself (XLogData.WALStart of
	// its pgoutput message), which is what Debezium's PostgreSQL connector
	// reports as source.lsn for the change (its lastReceivedLsn), distinct for
	// every change, also within one transaction.
	LSN pglogrepl.LSN
	// LastCommitLSN is the WAL position of the last commit message the capture
	// saw before this change (Debezium's lsn_commit, the first element of
	// source.sequence); nil before the capture's first commit.
	LastCommitLSN *pglogrepl.LSN
	TxID          uint32
	CommitTime    time.Time
	Columns       []column // the after image; the before image for a delete
}

type column struct {
	Name string
	Type uint32 // PostgreSQL type OID
	Null bool
	Text string // pgoutput text form
}

// PostgreSQL type OIDs the demo maps to Ion ints and bools; every other type is
// written as a string (the orders table has only bigint and text columns).
const (
	oidBool = 16
	oidInt8 = 20
	oidInt2 = 21
	oidInt4 = 23
)

// connectorName is the name Kestra's trigger derives for the seed flow's
// trigger (kestra_ + 8 hex of murmur3 over namespace|flow|trigger id|).
const connectorName = "kestra_c96fb3ae"

// encodeInline writes ch as Kestra's Debezium Postgres trigger does with
// format INLINE, deleted ADD_FIELD and metadata ADD_FIELD: the row's columns
// in table order with NULL columns left out, then deleted, then metadata
// {source, ts_ns, operation, ts_us, timestamp}, source holding Debezium
// 3.6.1's fields in the trigger's order. Text Ion is one value per line
// (Kestra 1.x); binary Ion is one chunk with its own version marker and symbol
// table per value (Kestra 2.x). The shape is pinned to real Debezium batches
// (tasks/cdc/testdata/debezium, written by harness/debezium) by
// TestEncodeInlineMatchesRealTrigger.
func encodeInline(out io.Writer, ch change, now time.Time, binary bool) error {
	var w ion.Writer
	if binary {
		w = ion.NewBinaryWriter(out)
	} else {
		w = ion.NewTextWriterOpts(out, ion.TextWriterQuietFinish)
	}
	ms := func(t time.Time) ion.Timestamp {
		return ion.NewTimestampWithFractionalSeconds(t.UTC().Truncate(time.Millisecond), ion.TimestampPrecisionNanosecond, ion.TimezoneUTC, 3)
	}
	integer := func(n int64) func() error { return func() error { return w.WriteInt(n) } }
	text := func(s string) func() error { return func() error { return w.WriteString(s) } }
	lastCommit := "null"
	if ch.LastCommitLSN != nil {
		lastCommit = fmt.Sprintf("%q", strconv.FormatUint(uint64(*ch.LastCommitLSN), 10))
	}
	steps := []func() error{w.BeginStruct}
	for _, col := range ch.Columns {
		if col.Null {
			continue // the trigger's JSON mapper drops null values (NON_NULL)
		}
		steps = append(steps, field(w, col.Name), value(w, col))
	}
	steps = append(steps,
		field(w, "deleted"), func() error { return w.WriteBool(ch.Operation == "DELETE") },
		field(w, "metadata"), w.BeginStruct,
		field(w, "source"), w.BeginStruct,
		field(w, "version"), text("3.6.1.Final"),
		field(w, "connector"), text("postgresql"),
		field(w, "name"), text(connectorName),
		field(w, "timestamp"), func() error { return w.WriteTimestamp(ms(ch.CommitTime)) },
		field(w, "snapshot"), text("false"),
		field(w, "db"), text(ch.DB),
		field(w, "table"), text(ch.Table),
		field(w, "row"), w.WriteNull,
		field(w, "source"), w.WriteNull,
		field(w, "schema"), text(ch.Schema),
		field(w, "sequence"), text(fmt.Sprintf(`[%s,"%d"]`, lastCommit, uint64(ch.LSN))),
		field(w, "lsn"), func() error { return w.WriteUint(uint64(ch.LSN)) },
		field(w, "ts_us"), integer(ch.CommitTime.UnixMicro()),
		field(w, "txId"), integer(int64(ch.TxID)),
		field(w, "ts_ns"), integer(ch.CommitTime.UnixMicro()*1000),
		w.EndStruct, // source
		field(w, "ts_ns"), integer(now.UnixNano()),
		field(w, "operation"), text(ch.Operation),
		field(w, "ts_us"), integer(now.UnixMicro()),
		field(w, "timestamp"), func() error { return w.WriteTimestamp(ms(now)) },
		w.EndStruct, // metadata
		w.EndStruct, // record
		w.Finish,
	)
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	if !binary {
		_, err := io.WriteString(out, "\n")
		return err
	}
	return nil
}

func field(w ion.Writer, name string) func() error {
	return func() error { return w.FieldName(ion.NewSymbolTokenFromString(name)) }
}

func value(w ion.Writer, col column) func() error {
	return func() error {
		if col.Null {
			return w.WriteNull()
		}
		switch col.Type {
		case oidInt2, oidInt4, oidInt8:
			n, err := strconv.ParseInt(col.Text, 10, 64)
			if err != nil {
				return fmt.Errorf("column %s: %w", col.Name, err)
			}
			return w.WriteInt(n)
		case oidBool:
			return w.WriteBool(col.Text == "t")
		default:
			return w.WriteString(col.Text)
		}
	}
}
