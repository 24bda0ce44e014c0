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
	LSN        pglogrepl.LSN
	TxID       uint32
	CommitTime time.Time
	Columns    []column // the after image; the before image for a delete
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

// encodeInline writes ch as Kestra's Debezium Postgres trigger does with
// format INLINE, deleted ADD_FIELD and metadata ADD_FIELD (plugin-debezium
// ChangeConsumer): the row's columns, then deleted, then metadata with
// operation, timestamp and source. Text Ion is one value per line (Kestra 1.x);
// binary Ion is one chunk with its own version marker per value (Kestra 2.x).
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
	steps := []func() error{w.BeginStruct}
	for _, col := range ch.Columns {
		steps = append(steps, field(w, col.Name), value(w, col))
	}
	steps = append(steps,
		field(w, "deleted"), func() error { return w.WriteBool(ch.Operation == "DELETE") },
		field(w, "metadata"), w.BeginStruct,
		field(w, "operation"), func() error { return w.WriteString(ch.Operation) },
		field(w, "timestamp"), func() error { return w.WriteTimestamp(ms(now)) },
		field(w, "source"), w.BeginStruct,
		field(w, "version"), func() error { return w.WriteString("3.2.1.Final") },
		field(w, "connector"), func() error { return w.WriteString("postgresql") },
		field(w, "name"), func() error { return w.WriteString("kestra_") },
		field(w, "timestamp"), func() error { return w.WriteTimestamp(ms(ch.CommitTime)) },
		field(w, "snapshot"), func() error { return w.WriteString("false") },
		field(w, "db"), func() error { return w.WriteString(ch.DB) },
		field(w, "table"), func() error { return w.WriteString(ch.Table) },
		field(w, "row"), w.WriteNull,
		field(w, "source"), w.WriteNull,
		field(w, "schema"), func() error { return w.WriteString(ch.Schema) },
		field(w, "txId"), func() error { return w.WriteInt(int64(ch.TxID)) },
		field(w, "lsn"), func() error { return w.WriteUint(uint64(ch.LSN)) },
		field(w, "xmin"), w.WriteNull,
		field(w, "sequence"), func() error {
			return w.WriteString(fmt.Sprintf(`[null,"%d"]`, uint64(ch.LSN)))
		},
		w.EndStruct, // source
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
