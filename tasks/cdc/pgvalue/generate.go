package pgvalue

import (
	"fmt"

	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// Generate maps a column of a table that has no mapping entry (table names
// it, schema.table, for messages) to a mapping column: its ClickHouse type
// on a server with caps, its source_type and, for varchar(n) and char(n),
// max_length n. Every generated type holds every value of the column
// exactly, but for two ranges: a timestamp or timestamptz outside
// DateTime64's 1900..2299 (or ±infinity) is refused when it comes, and a
// numeric(p, s) on a server without Decimal256 above 38 digits becomes a
// String. The column is Nullable unless it is NOT NULL or a key column.
// docs/mapping.md, "Generated mappings", has the table. A type it has no
// mapping for is refused (*ColumnError wrapping ErrUnsupportedType), as is
// a real or double precision key (ClickHouse keys cannot be Float): a
// mapping entry can map either to String.
func Generate(table string, c Column, caps mapping.ServerCaps) (mapping.Column, error) {
	fam := familyOf(c.TypeOID)
	out := mapping.Column{Name: c.Name, SourceType: fam.sourceName(c.TypeOID)}
	if out.SourceType != "" {
		out.SourceType = c.typeName()
	}
	refuse := func(format string, args ...any) (mapping.Column, error) {
		return mapping.Column{}, &ColumnError{Table: table, Column: c.Name, Type: c.typeName(),
			Err: fmt.Errorf("%w; "+format, append([]any{ErrUnsupportedType}, args...)...)}
	}
	switch fam {
	case famInt:
		out.Type = map[string]string{"smallint": "Int16", "integer": "Int32", "bigint": "Int64"}[fam.sourceName(c.TypeOID)]
	case famNumeric:
		out.Type = "String"
		if p, s, ok := numericMod(c.TypeMod); ok {
			if prec, scale := decimalFor(p, s); prec <= 38 || (prec <= 76 && caps.Decimal256) {
				out.Type = fmt.Sprintf("Decimal(%d, %d)", prec, scale)
			}
		}
	case famFloat4, famFloat8:
		if c.Key {
			return refuse("a key cannot be a Float in ClickHouse: map it to String (its exact text)")
		}
		out.Type = "Float64"
		if fam == famFloat4 {
			out.Type = "Float32"
		}
	case famBool:
		out.Type = "Bool"
	case famText:
		out.Type = "String"
		if n, ok := lengthMod(c); ok {
			out.MaxLength = n
		}
	case famJSON, famBytea, famDate, famTime:
		out.Type = "String"
	case famUUID:
		out.Type = "UUID"
	case famTimestamp, famTimestamptz:
		out.Type = "String"
		if caps.DateTime64 {
			out.Type = "DateTime64(6, 'UTC')"
		}
	default:
		return refuse("map it to String in a mapping entry (its text as PostgreSQL prints it)")
	}
	if !c.NotNull && !c.Key {
		out.Type = "Nullable(" + out.Type + ")"
	}
	return out, nil
}

// decimalFor returns the Decimal(P, S) that holds every value of
// numeric(p, s): s fraction digits and p - s integer digits, where
// PostgreSQL 15 allows a scale below zero (numeric(3, -2) holds 12300) and
// above the precision (numeric(2, 5) holds 0.00012).
func decimalFor(p, s int) (prec, scale int) {
	if s < 0 {
		return p - s, 0
	}
	return max(p, s), s
}
