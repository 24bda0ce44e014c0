package pgvalue

import (
	"fmt"
	"strconv"
	"strings"

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
	nullable := !c.NotNull && !c.Key
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
		return refuse("map it to %s in a mapping entry (its text as PostgreSQL prints it)", nullableIf(nullable, "String"))
	}
	out.Type = nullableIf(nullable, out.Type)
	return out, nil
}

// nullableIf is Nullable(t) for a column that allows NULL, else t.
func nullableIf(nullable bool, t string) string {
	if nullable {
		return "Nullable(" + t + ")"
	}
	return t
}

// CheckNullable refuses the mapping m of the source table whose catalog
// columns are cols (NotNull and Key set; table is schema.table, for the
// message) when a column that allows NULL (not NOT NULL, not of the key)
// is mapped to a type that is not Nullable, as a mapping entry written
// after "map it to String" may be: NULL has no other place in ClickHouse,
// and the first one would be refused when it comes (change.ErrNotNullable),
// stopping the stream there. A *ColumnError wrapping ErrNullable, naming
// the type to write; a generated mapping (Generate) always passes.
func CheckNullable(table string, cols []Column, m *mapping.Mapping) error {
	for _, c := range cols {
		j, ok := m.ByName[c.Name]
		if !ok || c.NotNull || c.Key || m.Cols[j].IsKey || m.Cols[j].Type.Nullable {
			continue
		}
		return &ColumnError{Table: table, Column: c.Name, Type: c.typeName(),
			Err: fmt.Errorf("%w; the mapping's %s cannot hold it: map it as Nullable(%s)", ErrNullable, m.Cols[j].Type, m.Cols[j].Type)}
	}
	return nil
}

// StreamsGenerated reports whether pgoutput streams STORED generated
// columns: from PostgreSQL 18 on (serverVersionNum, server_version_num,
// at least 180000), and only from a publication that publishes them
// (publishes: pg_publication.pubgencols = 's', publish_generated_columns
// = stored, or a column list that names the column). Before 18 the
// Relation message and every tuple leave them out.
func StreamsGenerated(serverVersionNum int, publishes bool) bool {
	return serverVersionNum >= 180000 && publishes
}

// OmitGenerated returns the columns of table (schema.table) to map when
// the stream does not carry its STORED generated columns (streamed false,
// StreamsGenerated): cols without them, and a note naming them for the
// log ("" when there are none). The initial load would copy their values
// and every streamed change would write NULL, so they are left out of the
// target. A generated column the table's mapping entry names (named
// reports whether the entry names a column) is refused instead, a
// *ColumnError wrapping ErrGeneratedColumn. With streamed true, cols are
// returned as they are.
func OmitGenerated(table string, cols []Column, streamed bool, named func(column string) bool) (keep []Column, note string, err error) {
	if streamed {
		return cols, "", nil
	}
	var left []string
	for _, c := range cols {
		if !c.Generated {
			keep = append(keep, c)
			continue
		}
		if named != nil && named(c.Name) {
			return nil, "", &ColumnError{Table: table, Column: c.Name, Type: c.typeName(), Err: fmt.Errorf(
				"%w (before PostgreSQL 18, or without publish_generated_columns = stored): its target column would be NULL after every streamed change",
				ErrGeneratedColumn)}
		}
		left = append(left, strconv.Quote(c.Name))
	}
	if len(left) == 0 {
		return cols, "", nil
	}
	return keep, fmt.Sprintf("table %s: generated column %s left out of its target: pgoutput does not stream generated columns "+
		"before PostgreSQL 18 (on 18: publish_generated_columns = stored); a view or query can compute it from the columns it is made of",
		table, strings.Join(left, ", ")), nil
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
