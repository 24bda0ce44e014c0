// Package pgvalue reads the values a logical replication slot streams
// (pgoutput, proto_version 1: each column of a tuple as its kind and, for
// text, the type's output function's text) into the canonical
// change.Value of the column's mapped ClickHouse type, and maps a source
// column to a ClickHouse type for a table that has no mapping entry. It
// does no I/O.
//
// Reading: NewDecoder pairs a source column (the Relation message's type
// OID and typmod) with its mapped column, refusing a ClickHouse type that
// cannot hold the source type's values (ErrWrongType); Decoder.Value then
// converts each value: 'n' NULL (refused in a column that is not Nullable,
// change.ErrNotNullable), 'u' an unchanged TOASTed value
// (change.Value.Toast: the value the row held before), 't' text. A value
// is converted exactly or refused, never rounded: NaN or ±Infinity in a
// Decimal, ±infinity in a Date or DateTime (ErrSpecialValue), a value out
// of range (ErrOutOfRange), a fraction the type would drop
// (ErrWouldRound), a string beyond max_length (ErrTooLong), bytes that are
// not the type's text (ErrNotText); each is a narrower cause of
// change.ErrBadValue, whose message names the value and what to map the
// column to. The canonical value is the one package decode makes of the
// same source value in a trigger batch (TestSameAsTriggerPath runs
// real Debezium's captures through both), so a key encodes to the same
// bytes whichever way it came. Converting a value allocates nothing but
// the string a String, Decimal or UUID value holds.
//
// The text depends on the walsender's settings (DateStyle, extra_float_digits,
// bytea_output, client_encoding, IntervalStyle), which ALTER DATABASE and
// ALTER ROLE … SET reach: the replication connection must set Settings as
// its startup parameters, which win, and check them with CheckSettings.
//
// Generating: Generate maps a source column (type, typmod, NOT NULL, key)
// to a mapping column for a server's capabilities, per the table in
// docs/mapping.md ("Generated mappings"), Nullable where the column allows
// NULL, and refuses a type it has no mapping for (ErrUnsupportedType)
// naming the table, the column and the type; a mapping entry can map any
// type to String (Nullable(String)), which holds its text. CheckNullable
// refuses a mapping that maps a column allowing NULL to a type that is not
// Nullable (ErrNullable). OmitGenerated leaves a STORED generated column,
// which pgoutput does not stream before PostgreSQL 18, out of a generated
// mapping with a note, and refuses an entry that names one
// (ErrGeneratedColumn).
package pgvalue
