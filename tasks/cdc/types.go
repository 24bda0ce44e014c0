package cdc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// kind is the family of a mapped ClickHouse type.
type kind uint8

const (
	kindInt        kind = iota + 1 // Int8..Int64: value.n holds int64 bits
	kindUint                       // UInt8..UInt64: value.n
	kindFloat32                    // value.n holds float64 bits of a float32-exact value
	kindFloat64                    // value.n holds float64 bits
	kindDecimal                    // value.s holds the unscaled integer in decimal text
	kindString                     // value.s holds the bytes
	kindBool                       // value.n is 0 or 1
	kindDate                       // value.n holds int64 days since 1970-01-01
	kindDateTime                   // value.n holds int64 Unix seconds
	kindDateTime64                 // value.n holds int64 ticks of 10^-prec s since the Unix epoch
	kindUUID                       // value.s holds the 16 bytes
)

// colType is a parsed ClickHouse column type from the mapping.
type colType struct {
	kind     kind
	bits     int    // Int/UInt width
	prec     int    // Decimal precision P, DateTime64 precision
	scale    int    // Decimal scale S
	tz       string // DateTime/DateTime64 time zone, "" = server default (read as UTC)
	loc      *time.Location
	nullable bool
}

// serverCaps are the type features of the connected ClickHouse server.
type serverCaps struct {
	// dateTime64: DateTime64 exists (ClickHouse 20.1+).
	dateTime64 bool
	// boolType: the Bool type exists (ClickHouse 21.12+); older servers store
	// Bool columns as UInt8.
	boolType bool
	// decimal256: Decimal(P, S) with P > 38 exists without a setting
	// (ClickHouse 21.6+; 20.8 to 21.5 need allow_experimental_bigint_types).
	decimal256 bool
}

// capsFor returns the capabilities of server version major.minor.
func capsFor(major, minor uint64) serverCaps {
	atLeast := func(ma, mi uint64) bool { return major > ma || (major == ma && minor >= mi) }
	return serverCaps{dateTime64: atLeast(20, 1), boolType: atLeast(21, 12), decimal256: atLeast(21, 6)}
}

// latestCaps are the capabilities of a current ClickHouse release (the
// newest the SQL is written for; the chdb tests run it).
func latestCaps() serverCaps { return serverCaps{dateTime64: true, boolType: true, decimal256: true} }

// minDate and maxDate bound ClickHouse Date (UInt16 days since 1970-01-01).
const maxDateDays = 65535

// DateTime64 range on current servers: 1900-01-01 00:00:00 .. 2299-12-31 23:59:59.999999999 UTC.
var (
	minDateTime64 = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	maxDateTime64 = time.Date(2299, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
)

// parseType parses a ClickHouse type of the supported list: Int8..Int64,
// UInt8..UInt64, Float32, Float64, Decimal(P, S) (1 <= P <= 76, 0 <= S <= P),
// String, Bool, Date, DateTime, DateTime('tz'), DateTime64(p), DateTime64(p,
// 'tz') (0 <= p <= 9), UUID, and Nullable(T) of any of these.
func parseType(s string) (colType, error) {
	s = strings.TrimSpace(s)
	if inner, ok := unwrap(s, "Nullable"); ok {
		t, err := parseType(inner)
		if err != nil {
			return colType{}, err
		}
		if t.nullable {
			return colType{}, fmt.Errorf("Nullable(Nullable(...)) is not a ClickHouse type")
		}
		t.nullable = true
		return t, nil
	}
	switch s {
	case "Int8", "Int16", "Int32", "Int64":
		bits, _ := strconv.Atoi(s[3:])
		return colType{kind: kindInt, bits: bits}, nil
	case "UInt8", "UInt16", "UInt32", "UInt64":
		bits, _ := strconv.Atoi(s[4:])
		return colType{kind: kindUint, bits: bits}, nil
	case "Float32":
		return colType{kind: kindFloat32}, nil
	case "Float64":
		return colType{kind: kindFloat64}, nil
	case "String":
		return colType{kind: kindString}, nil
	case "Bool":
		return colType{kind: kindBool}, nil
	case "Date":
		return colType{kind: kindDate}, nil
	case "DateTime":
		return colType{kind: kindDateTime, loc: time.UTC}, nil
	case "UUID":
		return colType{kind: kindUUID}, nil
	}
	if args, ok := unwrap(s, "Decimal"); ok {
		parts := splitArgs(args)
		if len(parts) != 2 {
			return colType{}, errors.New("a Decimal needs a precision and a scale, as in Decimal(18, 2)")
		}
		p, err1 := strconv.Atoi(parts[0])
		sc, err2 := strconv.Atoi(parts[1])
		if err1 != nil || err2 != nil || p < 1 || p > 76 || sc < 0 || sc > p {
			return colType{}, fmt.Errorf("Decimal(%s): precision must be 1..76 and scale 0..precision", args)
		}
		return colType{kind: kindDecimal, prec: p, scale: sc}, nil
	}
	if args, ok := unwrap(s, "DateTime64"); ok {
		parts := splitArgs(args)
		if len(parts) < 1 || len(parts) > 2 {
			return colType{}, fmt.Errorf("DateTime64 needs a precision and an optional time zone, as in DateTime64(6, 'UTC')")
		}
		p, err := strconv.Atoi(parts[0])
		if err != nil || p < 0 || p > 9 {
			return colType{}, fmt.Errorf("DateTime64 precision %q must be 0..9", parts[0])
		}
		t := colType{kind: kindDateTime64, prec: p, loc: time.UTC}
		if len(parts) == 2 {
			if err := t.setZone(parts[1]); err != nil {
				return colType{}, err
			}
		}
		return t, nil
	}
	if args, ok := unwrap(s, "DateTime"); ok {
		parts := splitArgs(args)
		if len(parts) != 1 {
			return colType{}, fmt.Errorf("DateTime takes one time zone, as in DateTime('UTC')")
		}
		t := colType{kind: kindDateTime, loc: time.UTC}
		if err := t.setZone(parts[0]); err != nil {
			return colType{}, err
		}
		return t, nil
	}
	return colType{}, fmt.Errorf("unsupported type %q (supported: Int8..Int64, UInt8..UInt64, Float32, Float64, "+
		"Decimal(P, S), String, Bool, Date, DateTime, DateTime('tz'), DateTime64(p, 'tz'), UUID, Nullable(T))", s)
}

func (t *colType) setZone(quoted string) error {
	if len(quoted) < 2 || quoted[0] != '\'' || quoted[len(quoted)-1] != '\'' {
		return fmt.Errorf("time zone %s must be a quoted name, as in 'UTC'", quoted)
	}
	name := quoted[1 : len(quoted)-1]
	if name == "" || strings.ContainsAny(name, `'\`) {
		return fmt.Errorf("time zone %s is not a time zone name", quoted)
	}
	if name == "Local" { // Go's name for its own zone, unknown to ClickHouse
		return fmt.Errorf("time zone %s is not an IANA time zone name (such as 'UTC' or 'Europe/Berlin')", quoted)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return fmt.Errorf("unknown time zone %s: %w", quoted, err)
	}
	t.tz, t.loc = name, loc
	return nil
}

// unwrap returns the text between "name(" and a final ")".
func unwrap(s, name string) (string, bool) {
	if !strings.HasPrefix(s, name+"(") || !strings.HasSuffix(s, ")") {
		return "", false
	}
	return s[len(name)+1 : len(s)-1], true
}

func splitArgs(s string) []string {
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// ddl renders the type as ClickHouse prints it in system.columns, for the
// given server: Bool becomes UInt8 on servers without a Bool type.
func (t colType) ddl(caps serverCaps) string {
	var s string
	switch t.kind {
	case kindInt:
		s = "Int" + strconv.Itoa(t.bits)
	case kindUint:
		s = "UInt" + strconv.Itoa(t.bits)
	case kindFloat32:
		s = "Float32"
	case kindFloat64:
		s = "Float64"
	case kindDecimal:
		s = fmt.Sprintf("Decimal(%d, %d)", t.prec, t.scale)
	case kindString:
		s = "String"
	case kindBool:
		s = "UInt8"
		if caps.boolType {
			s = "Bool"
		}
	case kindDate:
		s = "Date"
	case kindDateTime:
		s = "DateTime"
		if t.tz != "" {
			s = fmt.Sprintf("DateTime('%s')", t.tz)
		}
	case kindDateTime64:
		s = fmt.Sprintf("DateTime64(%d)", t.prec)
		if t.tz != "" {
			s = fmt.Sprintf("DateTime64(%d, '%s')", t.prec, t.tz)
		}
	case kindUUID:
		s = "UUID"
	}
	if t.nullable {
		return "Nullable(" + s + ")"
	}
	return s
}

// String renders the type as the mapping names it (Bool as Bool), for
// messages.
func (t colType) String() string { return t.ddl(latestCaps()) }

// sameType reports whether a type name read from system.columns is the type
// the mapping asks for. Spaces are ignored; a Bool column may be stored as
// UInt8 (created on a server before 21.12) or as Bool.
func (t colType) sameType(actual string) bool {
	norm := func(s string) string { return strings.ReplaceAll(s, " ", "") }
	a := norm(actual)
	if a == norm(t.ddl(serverCaps{})) || a == norm(t.String()) {
		return true
	}
	return false
}

// ticksPerSecond returns 10^prec for DateTime64.
func (t colType) ticksPerSecond() int64 {
	n := int64(1)
	for range t.prec {
		n *= 10
	}
	return n
}

// pgType is the PostgreSQL type a mapping names for a column (source_type):
// it restricts the ClickHouse types the column may be mapped to, and for a
// String column it says how the value is written (a timestamp in one exact
// text form, whatever form the trigger wrote it in).
type pgType uint8

const (
	pgNone pgType = iota // source_type not given: the value's shape decides
	pgSmallint
	pgInteger
	pgBigint
	pgNumeric
	pgReal
	pgDouble
	pgBoolean
	pgText
	pgUUID
	pgDate
	pgTimestamp
	pgTimestamptz
	pgJSON
	pgBytea
)

// pgTypeNames are the canonical source_type names, by pgType.
var pgTypeNames = [...]string{pgNone: "", pgSmallint: "smallint", pgInteger: "integer", pgBigint: "bigint",
	pgNumeric: "numeric", pgReal: "real", pgDouble: "double precision", pgBoolean: "boolean", pgText: "text",
	pgUUID: "uuid", pgDate: "date", pgTimestamp: "timestamp", pgTimestamptz: "timestamptz", pgJSON: "jsonb",
	pgBytea: "bytea"}

func (p pgType) String() string { return pgTypeNames[p] }

// supportedPGTypes lists what source_type accepts, for messages.
const supportedPGTypes = "smallint, integer, bigint, numeric, numeric(p, s), real, double precision, boolean, " +
	"text, varchar(n), uuid, date, timestamp, timestamptz, json, jsonb, bytea"

// parsePGType reads a source_type as PostgreSQL spells it (format_type's
// names and the usual aliases; a type modifier such as (12, 2) or (6) is
// allowed where PostgreSQL has one, and does not change the rules).
func parsePGType(s string) (pgType, error) {
	name := strings.Join(strings.Fields(strings.ToLower(s)), " ")
	base, mod := name, ""
	if i := strings.IndexByte(name, '('); i >= 0 {
		j := strings.IndexByte(name, ')')
		if j < i {
			return pgNone, fmt.Errorf("source_type %q: unbalanced parentheses", s)
		}
		base, mod = strings.TrimSpace(name[:i]+name[j+1:]), name[i:j+1]
	}
	byName := map[string]pgType{
		"smallint": pgSmallint, "int2": pgSmallint,
		"integer": pgInteger, "int": pgInteger, "int4": pgInteger,
		"bigint": pgBigint, "int8": pgBigint,
		"numeric": pgNumeric, "decimal": pgNumeric,
		"real": pgReal, "float4": pgReal,
		"double precision": pgDouble, "float8": pgDouble,
		"boolean": pgBoolean, "bool": pgBoolean,
		"text": pgText, "varchar": pgText, "character varying": pgText, "char": pgText, "character": pgText, "bpchar": pgText,
		"uuid": pgUUID, "date": pgDate,
		"timestamp": pgTimestamp, "timestamp without time zone": pgTimestamp,
		"timestamptz": pgTimestamptz, "timestamp with time zone": pgTimestamptz,
		"json": pgJSON, "jsonb": pgJSON, "bytea": pgBytea,
	}
	p, ok := byName[base]
	takesMod := p == pgNumeric || p == pgText || p == pgTimestamp || p == pgTimestamptz
	if !ok || (mod != "" && (!takesMod || base == "text")) {
		return pgNone, fmt.Errorf("source_type %q is not a PostgreSQL type changesink reads (supported: %s)", s, supportedPGTypes)
	}
	return p, nil
}

// mapsTo names the ClickHouse types a column of PostgreSQL type p may be
// mapped to, for messages; allows reports whether t is one of them.
func (p pgType) mapsTo() string {
	switch p {
	case pgSmallint:
		return "Int16, Int32 or Int64"
	case pgInteger:
		return "Int32 or Int64"
	case pgBigint:
		return "Int64"
	case pgNumeric:
		return "Decimal(P, S), or String (the exact decimal text, for values no Decimal of the server holds)"
	case pgReal:
		return "Float32 or Float64"
	case pgDouble:
		return "Float64"
	case pgBoolean:
		return "Bool"
	case pgText, pgJSON, pgBytea:
		return "String"
	case pgUUID:
		return "UUID or String"
	case pgDate:
		return "Date (1970-01-01..2149-06-06) or String (YYYY-MM-DD, any date)"
	case pgTimestamp:
		return "DateTime('UTC') (whole seconds), DateTime64(6, 'UTC') (ClickHouse 20.1 or newer) or String " +
			"(YYYY-MM-DD hh:mm:ss.ffffff; a timestamp has no time zone and Debezium sends its wall-clock time as UTC, so only 'UTC' shows it unchanged)"
	case pgTimestamptz:
		return "DateTime or DateTime('tz') (whole seconds), DateTime64(6, 'UTC') (ClickHouse 20.1 or newer; any time zone) or String (YYYY-MM-DD hh:mm:ss.ffffff in UTC)"
	}
	return "any type"
}

func (p pgType) allows(t colType) bool {
	utc := t.tz == "UTC"
	switch p {
	case pgNone:
		return true
	case pgSmallint:
		return t.kind == kindInt && t.bits >= 16
	case pgInteger:
		return t.kind == kindInt && t.bits >= 32
	case pgBigint:
		return t.kind == kindInt && t.bits == 64
	case pgNumeric:
		return t.kind == kindDecimal || t.kind == kindString
	case pgReal:
		return t.kind == kindFloat32 || t.kind == kindFloat64
	case pgDouble:
		return t.kind == kindFloat64
	case pgBoolean:
		return t.kind == kindBool
	case pgText, pgJSON, pgBytea:
		return t.kind == kindString
	case pgUUID:
		return t.kind == kindUUID || t.kind == kindString
	case pgDate:
		return t.kind == kindDate || t.kind == kindString
	case pgTimestamp:
		return t.kind == kindString || ((t.kind == kindDateTime || t.kind == kindDateTime64) && utc)
	case pgTimestamptz:
		return t.kind == kindString || t.kind == kindDateTime || t.kind == kindDateTime64
	}
	return false
}
