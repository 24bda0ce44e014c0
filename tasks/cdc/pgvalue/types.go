package pgvalue

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"
)

// Column is a source column as pgoutput's Relation message and the catalog
// describe it.
type Column struct {
	// Name is the column's name (the Relation message's).
	Name string
	// TypeOID is the column's type (pg_attribute.atttypid): a domain's own
	// OID, not its base type's.
	TypeOID uint32
	// TypeMod is the type modifier (atttypmod): -1 when the column has none.
	TypeMod int32
	// TypeName names a type this package does not know, for messages: the
	// Type message's name, or format_type's; "" prints the OID.
	TypeName string
	// NotNull is pg_attribute.attnotnull (the Relation message does not
	// carry it).
	NotNull bool
	// Key marks a column of the table's key: the replica identity index's
	// columns (the Relation message's key flag). Under REPLICA IDENTITY FULL
	// every column carries that flag: pass the primary key's columns.
	Key bool
	// Generated marks a STORED generated column (pg_attribute.attgenerated
	// 's'), whose values pgoutput does not stream before PostgreSQL 18
	// (OmitGenerated). The Relation message does not carry it: the catalog
	// does.
	Generated bool
}

// family is how a PostgreSQL type prints its values, and what it may be
// mapped to.
type family uint8

const (
	famOther       family = iota // any other type: only a String, holding its text as printed
	famInt                       // smallint, integer, bigint
	famNumeric                   // numeric, with or without (p, s)
	famFloat4                    // real
	famFloat8                    // double precision
	famBool                      // boolean
	famText                      // text, varchar(n), char(n)
	famJSON                      // json, jsonb
	famBytea                     // bytea
	famUUID                      // uuid
	famDate                      // date
	famTimestamp                 // timestamp [without time zone]
	famTimestamptz               // timestamp with time zone
	famTime                      // time, timetz: only a String, holding the text
)

// familyOf returns the family of a type OID.
func familyOf(oid uint32) family {
	switch oid {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
		return famInt
	case pgtype.NumericOID:
		return famNumeric
	case pgtype.Float4OID:
		return famFloat4
	case pgtype.Float8OID:
		return famFloat8
	case pgtype.BoolOID:
		return famBool
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID:
		return famText
	case pgtype.JSONOID, pgtype.JSONBOID:
		return famJSON
	case pgtype.ByteaOID:
		return famBytea
	case pgtype.UUIDOID:
		return famUUID
	case pgtype.DateOID:
		return famDate
	case pgtype.TimestampOID:
		return famTimestamp
	case pgtype.TimestamptzOID:
		return famTimestamptz
	case pgtype.TimeOID, pgtype.TimetzOID:
		return famTime
	}
	return famOther
}

// sourceName is the name the mapping's source_type gives the family
// (mapping's pgType names), "" for a family source_type cannot name.
func (f family) sourceName(oid uint32) string {
	switch f {
	case famInt:
		switch oid {
		case pgtype.Int2OID:
			return "smallint"
		case pgtype.Int4OID:
			return "integer"
		}
		return "bigint"
	case famNumeric:
		return "numeric"
	case famFloat4:
		return "real"
	case famFloat8:
		return "double precision"
	case famBool:
		return "boolean"
	case famText:
		return "text"
	case famJSON:
		return "jsonb"
	case famBytea:
		return "bytea"
	case famUUID:
		return "uuid"
	case famDate:
		return "date"
	case famTimestamp:
		return "timestamp"
	case famTimestamptz:
		return "timestamptz"
	}
	return ""
}

// typeName renders the column's type as PostgreSQL spells it in DDL, with
// its modifier: numeric(12,2), varchar(8), timestamptz(3).
func (c Column) typeName() string {
	base := ""
	switch c.TypeOID {
	case pgtype.Int2OID:
		base = "smallint"
	case pgtype.Int4OID:
		base = "integer"
	case pgtype.Int8OID:
		base = "bigint"
	case pgtype.NumericOID:
		if p, s, ok := numericMod(c.TypeMod); ok {
			return fmt.Sprintf("numeric(%d,%d)", p, s)
		}
		return "numeric"
	case pgtype.Float4OID:
		base = "real"
	case pgtype.Float8OID:
		base = "double precision"
	case pgtype.BoolOID:
		base = "boolean"
	case pgtype.TextOID:
		base = "text"
	case pgtype.VarcharOID:
		base = "varchar"
	case pgtype.BPCharOID:
		base = "char"
	case pgtype.JSONOID:
		base = "json"
	case pgtype.JSONBOID:
		base = "jsonb"
	case pgtype.ByteaOID:
		base = "bytea"
	case pgtype.UUIDOID:
		base = "uuid"
	case pgtype.DateOID:
		base = "date"
	case pgtype.TimestampOID:
		base = "timestamp"
	case pgtype.TimestamptzOID:
		base = "timestamptz"
	case pgtype.TimeOID:
		base = "time"
	case pgtype.TimetzOID:
		base = "timetz"
	default:
		if c.TypeName != "" {
			return c.TypeName
		}
		return fmt.Sprintf("type OID %d", c.TypeOID)
	}
	if n, ok := lengthMod(c); ok {
		return fmt.Sprintf("%s(%d)", base, n)
	}
	return base
}

// varHeader is PostgreSQL's VARHDRSZ, which length and numeric modifiers
// include.
const varHeader = 4

// numericMod decodes a numeric's typmod: ((p << 16) | (s & 0x7ff)) + 4,
// the scale an 11-bit signed number (-1000..1000 since PostgreSQL 15, so
// numeric(3, -2) and numeric(2, 5) exist). ok is false for an unconstrained
// numeric.
func numericMod(mod int32) (prec, scale int, ok bool) {
	if mod < varHeader {
		return 0, 0, false
	}
	m := mod - varHeader
	prec = int(m>>16) & 0xffff
	scale = (int(m&0x7ff) ^ 1024) - 1024
	return prec, scale, true
}

// lengthMod returns n of varchar(n) and char(n), and the fraction digits
// of timestamp(p), timestamptz(p), time(p) and timetz(p).
func lengthMod(c Column) (int, bool) {
	switch c.TypeOID {
	case pgtype.VarcharOID, pgtype.BPCharOID:
		if c.TypeMod >= varHeader {
			return int(c.TypeMod - varHeader), true
		}
	case pgtype.TimestampOID, pgtype.TimestamptzOID, pgtype.TimeOID, pgtype.TimetzOID:
		if c.TypeMod >= 0 {
			return int(c.TypeMod), true
		}
	}
	return 0, false
}

// SameText reports whether a value stored as a column of type from (an
// OID) prints the same text as a column of type to, with no rewrite of
// the table between: the same type (a new type modifier: varchar(10) to
// varchar(20), numeric(10,2) to numeric(12,2)), or text and varchar.
func SameText(from, to uint32) bool {
	textual := func(oid uint32) bool { return oid == 25 || oid == 1043 } // text, varchar
	return from == to || (textual(from) && textual(to))
}
