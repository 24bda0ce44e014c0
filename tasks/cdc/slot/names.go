package slot

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Table names a source table.
type Table struct {
	Schema string
	Name   string
}

// ParseTable reads "schema.table" (or "table", in schema public). Names
// are taken as written, without quotes: "Orders" is the table created as
// "Orders"; a dot can only separate the schema from the table.
func ParseTable(s string) (Table, error) {
	schema, name, found := strings.Cut(s, ".")
	if !found {
		schema, name = "public", s
	}
	t := Table{Schema: schema, Name: name}
	if schema == "" || name == "" || strings.Contains(name, ".") || strings.ContainsRune(s, 0) {
		return t, configErr(fmt.Errorf("table %q: %w: want schema.table", s, ErrConfig))
	}
	return t, nil
}

func (t Table) String() string { return t.Schema + "." + t.Name }

// sql quotes the name for SQL.
func (t Table) sql() string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

// checkSlotName enforces PostgreSQL's rule for slot names (lower-case
// letters, digits, underscores; at most NAMEDATALEN-1 bytes), so a name
// can be written into a replication command without quoting.
func checkSlotName(name string) error {
	if name == "" || len(name) > 63 {
		return configErr(fmt.Errorf("slot name %q: %w: 1 to 63 characters", name, ErrConfig))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return configErr(fmt.Errorf("slot name %q: %w: only a-z, 0-9 and _", name, ErrConfig))
		}
	}
	return nil
}

// checkPublicationName holds publication names to the same rule as slot
// names: they are passed as a plugin option (a quoted list PostgreSQL
// splits on commas), where a comma, quote or upper-case letter would need
// escaping rules that differ between the SQL and the option parser.
func checkPublicationName(name string) error {
	if err := checkSlotName(name); err != nil {
		return configErr(fmt.Errorf("publication name %q: %w: 1 to 63 of a-z, 0-9 and _", name, ErrConfig))
	}
	return nil
}

// quoteLiteral quotes s as an SQL string literal (standard_conforming_strings).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
