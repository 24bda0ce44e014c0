package mapping

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
	KindInt        kind = iota + 1 // Int8..Int64: value.n holds int64 bits
	KindUint                       // UInt8..UInt64: value.n
	KindFloat32                    // value.n holds float64 bits of a float32-exact value
	KindFloat64                    // value.n holds float64 bits
	KindDecimal                    // value.s holds the unscaled integer in decimal text
	KindString                     // value.s holds the bytes
	KindBool                       // value.n is 0 or 1
	KindDate                       // value.n holds int64 days since 1970-01-01
	KindDateTime                   // value.n holds int64 Unix seconds
	KindDateTime64                 // value.n holds int64 ticks of 10^-prec s since the Unix epoch
	KindUUID                       // value.s holds the 16 bytes
)

// Type is a parsed ClickHouse column type from the mapping.
type Type struct {
	Kind     kind
	Bits     int    // Int/UInt width
	Prec     int    // Decimal precision P, DateTime64 precision
	Scale    int    // Decimal scale S
	tz       string // DateTime/DateTime64 time zone, "" = server default (read as UTC)
	Loc      *time.Location
	Nullable bool
}

// ServerCaps are the type features of the connected ClickHouse server.
type ServerCaps struct {
	// DateTime64: DateTime64 exists (ClickHouse 20.1+).
	DateTime64 bool
	// BoolType: the Bool type exists (ClickHouse 21.12+); older servers store
	// Bool columns as UInt8.
	BoolType bool
	// Decimal256: Decimal(P, S) with P > 38 exists without a setting
	// (ClickHouse 21.6+; 20.8 to 21.5 need allow_experimental_bigint_types).
	Decimal256 bool
	// DateDays and DateTimeSeconds are the last Date (days since
	// 1970-01-01) and DateTime (Unix seconds) the server shows: ClickHouse
	// 18.16 stores the whole UInt16 and UInt32 but reads a Date after
	// 2106-02-07 and a DateTime after 2106-02-06 23:59:59 UTC back as 1970
	// (target.Connect asks the server). Zero: the whole range.
	DateDays, DateTimeSeconds uint64
	// IsDeleted: ReplacingMergeTree takes an is_deleted column, whose
	// delete markers FINAL leaves out (ClickHouse 23.2+); setup makes the
	// target ReplacingMergeTree(version, deleted) there.
	IsDeleted bool
	// RenameColumn: ALTER TABLE … RENAME COLUMN exists (ClickHouse 20.4+);
	// a column the source renames is renamed in place, else the table is
	// loaded again into a new target.
	RenameColumn bool
	// Exchange: EXCHANGE TABLES swaps two tables of an Atomic database in
	// one step (ClickHouse 20.10+, where Atomic is the default engine);
	// else a rebuilt target is swapped in by one RENAME TABLE of both.
	Exchange bool
}

// Date and DateTime limits of ClickHouse 18.16 (ServerCaps).
const (
	ShortDateDays        = 49710      // 2106-02-07
	ShortDateTimeSeconds = 4294943999 // 2106-02-06 23:59:59 UTC
)

// CapsFor returns the capabilities of server version major.minor.
func CapsFor(major, minor uint64) ServerCaps {
	atLeast := func(ma, mi uint64) bool { return major > ma || (major == ma && minor >= mi) }
	return ServerCaps{DateTime64: atLeast(20, 1), BoolType: atLeast(21, 12), Decimal256: atLeast(21, 6), IsDeleted: atLeast(23, 2),
		RenameColumn: atLeast(20, 4), Exchange: atLeast(20, 10)}
}

// latestCaps are the capabilities of a current ClickHouse release, where
// a type's String renders its DDL.
func latestCaps() ServerCaps {
	return ServerCaps{DateTime64: true, BoolType: true, Decimal256: true, IsDeleted: true}
}

// MaxDateDays is the last day a ClickHouse Date holds (UInt16 days since 1970-01-01).
const MaxDateDays = 65535

// DateTime64 range on current servers: 1900-01-01 00:00:00 .. 2299-12-31 23:59:59.999999999 UTC.
var (
	MinDateTime64 = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	MaxDateTime64 = time.Date(2299, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
)

// ParseType parses a ClickHouse type of the supported list: Int8..Int64,
// UInt8..UInt64, Float32, Float64, Decimal(P, S) (1 <= P <= 76, 0 <= S <= P),
// String, Bool, Date, DateTime, DateTime('tz'), DateTime64(p), DateTime64(p,
// 'tz') (0 <= p <= 9), UUID, and Nullable(T) of any of these.
func ParseType(s string) (Type, error) {
	s = strings.TrimSpace(s)
	if inner, ok := unwrap(s, "Nullable"); ok {
		t, err := ParseType(inner)
		if err != nil {
			return Type{}, err
		}
		if t.Nullable {
			return Type{}, fmt.Errorf("Nullable(Nullable(...)) is not a ClickHouse type")
		}
		t.Nullable = true
		return t, nil
	}
	switch s {
	case "Int8", "Int16", "Int32", "Int64":
		bits, _ := strconv.Atoi(s[3:])
		return Type{Kind: KindInt, Bits: bits}, nil
	case "UInt8", "UInt16", "UInt32", "UInt64":
		bits, _ := strconv.Atoi(s[4:])
		return Type{Kind: KindUint, Bits: bits}, nil
	case "Float32":
		return Type{Kind: KindFloat32}, nil
	case "Float64":
		return Type{Kind: KindFloat64}, nil
	case "String":
		return Type{Kind: KindString}, nil
	case "Bool":
		return Type{Kind: KindBool}, nil
	case "Date":
		return Type{Kind: KindDate}, nil
	case "DateTime":
		return Type{Kind: KindDateTime, Loc: time.UTC}, nil
	case "UUID":
		return Type{Kind: KindUUID}, nil
	}
	if args, ok := unwrap(s, "Decimal"); ok {
		parts := splitArgs(args)
		if len(parts) != 2 {
			return Type{}, errors.New("a Decimal needs a precision and a scale, as in Decimal(18, 2)")
		}
		p, err1 := strconv.Atoi(parts[0])
		sc, err2 := strconv.Atoi(parts[1])
		if err1 != nil || err2 != nil || p < 1 || p > 76 || sc < 0 || sc > p {
			return Type{}, fmt.Errorf("Decimal(%s): precision must be 1..76 and scale 0..precision", args)
		}
		return Type{Kind: KindDecimal, Prec: p, Scale: sc}, nil
	}
	if args, ok := unwrap(s, "DateTime64"); ok {
		parts := splitArgs(args)
		if len(parts) < 1 || len(parts) > 2 {
			return Type{}, fmt.Errorf("DateTime64 needs a precision and an optional time zone, as in DateTime64(6, 'UTC')")
		}
		p, err := strconv.Atoi(parts[0])
		if err != nil || p < 0 || p > 9 {
			return Type{}, fmt.Errorf("DateTime64 precision %q must be 0..9", parts[0])
		}
		t := Type{Kind: KindDateTime64, Prec: p, Loc: time.UTC}
		if len(parts) == 2 {
			if err := t.setZone(parts[1]); err != nil {
				return Type{}, err
			}
		}
		return t, nil
	}
	if args, ok := unwrap(s, "DateTime"); ok {
		parts := splitArgs(args)
		if len(parts) != 1 {
			return Type{}, fmt.Errorf("DateTime takes one time zone, as in DateTime('UTC')")
		}
		t := Type{Kind: KindDateTime, Loc: time.UTC}
		if err := t.setZone(parts[0]); err != nil {
			return Type{}, err
		}
		return t, nil
	}
	return Type{}, fmt.Errorf("unsupported type %q (supported: %s)", s, SupportedTypes)
}

// SupportedTypes lists the ClickHouse types a mapping may name.
const SupportedTypes = "Int8..Int64, UInt8..UInt64, Float32, Float64, Decimal(P, S), String, Bool, Date, DateTime, DateTime('tz'), " +
	"DateTime64(p, 'tz'), UUID, Nullable(T)"

func (t *Type) setZone(quoted string) error {
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
	t.tz, t.Loc = name, loc
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

// DDL renders the type as ClickHouse prints it in system.columns, for the
// given server: Bool becomes UInt8 on servers without a Bool type.
func (t Type) DDL(caps ServerCaps) string {
	var s string
	switch t.Kind {
	case KindInt:
		s = "Int" + strconv.Itoa(t.Bits)
	case KindUint:
		s = "UInt" + strconv.Itoa(t.Bits)
	case KindFloat32:
		s = "Float32"
	case KindFloat64:
		s = "Float64"
	case KindDecimal:
		s = fmt.Sprintf("Decimal(%d, %d)", t.Prec, t.Scale)
	case KindString:
		s = "String"
	case KindBool:
		s = "UInt8"
		if caps.BoolType {
			s = "Bool"
		}
	case KindDate:
		s = "Date"
	case KindDateTime:
		s = "DateTime"
		if t.tz != "" {
			s = fmt.Sprintf("DateTime('%s')", t.tz)
		}
	case KindDateTime64:
		s = fmt.Sprintf("DateTime64(%d)", t.Prec)
		if t.tz != "" {
			s = fmt.Sprintf("DateTime64(%d, '%s')", t.Prec, t.tz)
		}
	case KindUUID:
		s = "UUID"
	}
	if t.Nullable {
		return "Nullable(" + s + ")"
	}
	return s
}

// String renders the type as the mapping names it (Bool as Bool), for
// messages.
func (t Type) String() string { return t.DDL(latestCaps()) }

// Zone is a DateTime or DateTime64 column's time zone, "" for the
// server's default.
func (t Type) Zone() string { return t.tz }

// SameType reports whether a type name read from system.columns is the type
// the mapping asks for. Spaces are ignored; a Bool column may be stored as
// UInt8 (created on a server before 21.12) or as Bool.
func (t Type) SameType(actual string) bool {
	norm := func(s string) string { return strings.ReplaceAll(s, " ", "") }
	a := norm(actual)
	if a == norm(t.DDL(ServerCaps{})) || a == norm(t.String()) {
		return true
	}
	return false
}

// TicksPerSecond returns 10^prec for DateTime64.
func (t Type) TicksPerSecond() int64 {
	n := int64(1)
	for range t.Prec {
		n *= 10
	}
	return n
}

// pgType is the PostgreSQL type a mapping names for a column (source_type):
// it restricts the ClickHouse types the column may be mapped to, and for a
// String column it says how the value is written (a timestamp in one exact
// text form, whatever form the trigger wrote it in).
type pgType uint8

// The source types; decode writes the exported ones' values to a String
// column in their own text form.
const (
	pgNone pgType = iota // source_type not given: the value's shape decides
	pgSmallint
	pgInteger
	pgBigint
	PGNumeric
	pgReal
	pgDouble
	pgBoolean
	pgText
	PGUUID
	PGDate
	PGTimestamp
	PGTimestamptz
	pgJSON
	pgBytea
)

// pgTypeNames are the canonical source_type names, by pgType.
var pgTypeNames = [...]string{pgNone: "", pgSmallint: "smallint", pgInteger: "integer", pgBigint: "bigint",
	PGNumeric: "numeric", pgReal: "real", pgDouble: "double precision", pgBoolean: "boolean", pgText: "text",
	PGUUID: "uuid", PGDate: "date", PGTimestamp: "timestamp", PGTimestamptz: "timestamptz", pgJSON: "jsonb",
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
		"numeric": PGNumeric, "decimal": PGNumeric,
		"real": pgReal, "float4": pgReal,
		"double precision": pgDouble, "float8": pgDouble,
		"boolean": pgBoolean, "bool": pgBoolean,
		"text": pgText, "varchar": pgText, "character varying": pgText, "char": pgText, "character": pgText, "bpchar": pgText,
		"uuid": PGUUID, "date": PGDate,
		"timestamp": PGTimestamp, "timestamp without time zone": PGTimestamp,
		"timestamptz": PGTimestamptz, "timestamp with time zone": PGTimestamptz,
		"json": pgJSON, "jsonb": pgJSON, "bytea": pgBytea,
	}
	p, ok := byName[base]
	takesMod := p == PGNumeric || p == pgText || p == PGTimestamp || p == PGTimestamptz
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
	case PGNumeric:
		return "Decimal(P, S), or String (the exact decimal text, for values no Decimal of the server holds)"
	case pgReal:
		return "Float32 or Float64"
	case pgDouble:
		return "Float64"
	case pgBoolean:
		return "Bool"
	case pgText, pgJSON, pgBytea:
		return "String"
	case PGUUID:
		return "UUID or String"
	case PGDate:
		return "Date (1970-01-01..2149-06-06) or String (YYYY-MM-DD, any date)"
	case PGTimestamp:
		return "DateTime('UTC') (whole seconds), DateTime64(6, 'UTC') (ClickHouse 20.1 or newer) or String " +
			"(YYYY-MM-DD hh:mm:ss.ffffff; a timestamp has no time zone and Debezium sends its wall-clock time as UTC, so only 'UTC' shows it unchanged)"
	case PGTimestamptz:
		return "DateTime or DateTime('tz') (whole seconds), DateTime64(6, 'UTC') (ClickHouse 20.1 or newer; any time zone) or String (YYYY-MM-DD hh:mm:ss.ffffff in UTC)"
	}
	return "any type"
}

func (p pgType) allows(t Type) bool {
	utc := t.tz == "UTC"
	switch p {
	case pgNone:
		return true
	case pgSmallint:
		return t.Kind == KindInt && t.Bits >= 16
	case pgInteger:
		return t.Kind == KindInt && t.Bits >= 32
	case pgBigint:
		return t.Kind == KindInt && t.Bits == 64
	case PGNumeric:
		return t.Kind == KindDecimal || t.Kind == KindString
	case pgReal:
		return t.Kind == KindFloat32 || t.Kind == KindFloat64
	case pgDouble:
		return t.Kind == KindFloat64
	case pgBoolean:
		return t.Kind == KindBool
	case pgText, pgJSON, pgBytea:
		return t.Kind == KindString
	case PGUUID:
		return t.Kind == KindUUID || t.Kind == KindString
	case PGDate:
		return t.Kind == KindDate || t.Kind == KindString
	case PGTimestamp:
		return t.Kind == KindString || ((t.Kind == KindDateTime || t.Kind == KindDateTime64) && utc)
	case PGTimestamptz:
		return t.Kind == KindString || t.Kind == KindDateTime || t.Kind == KindDateTime64
	}
	return false
}

// Widens reports whether every value of type from is a value of type to,
// to being a wider type of the same kind ClickHouse can MODIFY a column
// to: a wider integer of the same sign, Float32 to Float64, a Decimal of
// more digits and the same scale; Nullable as from is, or added.
func Widens(from, to Type) bool {
	if from.Nullable && !to.Nullable {
		return false
	}
	switch {
	case from.Kind == KindInt && to.Kind == KindInt, from.Kind == KindUint && to.Kind == KindUint:
		return to.Bits >= from.Bits
	case from.Kind == KindFloat32:
		return to.Kind == KindFloat32 || to.Kind == KindFloat64
	case from.Kind == KindDecimal && to.Kind == KindDecimal:
		return to.Scale == from.Scale && to.Prec >= from.Prec
	}
	return from.Kind == to.Kind && from.DDL(ServerCaps{}) == to.DDL(ServerCaps{})
}
