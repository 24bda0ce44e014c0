package mapping

import (
	"regexp"
	"strings"
)

// QuoteIdent returns a ClickHouse identifier: bare when it is a plain word
// that is not a keyword (so the orders DDL reads exactly like the seed's),
// else in backquotes with \ and ` escaped.
func QuoteIdent(s string) string {
	if bareIdent.MatchString(s) && !reservedWords[strings.ToUpper(s)] {
		return s
	}
	return "`" + strings.NewReplacer(`\`, `\\`, "`", "\\`").Replace(s) + "`"
}

// Qualified renders db.name. The database "default" stays bare, as the
// seed writes it: a keyword is harmless before the dot.
func Qualified(db, name string) string {
	q := QuoteIdent(db)
	if db == "default" {
		q = db
	}
	return q + "." + QuoteIdent(name)
}

// LedgerName is the ledger table's name.
func LedgerName(m *Mapping) string { return m.Target.Table + "_ledger" }

// LockName is the lock table's name.
func LockName(m *Mapping) string { return m.Target.Table + "_lock" }

var bareIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedWords are keywords that must not appear bare where changesink
// puts identifiers (column lists, FROM, ORDER BY, WHERE).
var reservedWords = func() map[string]bool {
	words := map[string]bool{}
	for _, w := range strings.Fields(`ALIAS ALL AND ANTI ANY ARRAY AS ASC ASOF ATTACH BETWEEN BOTH BY CASE CAST CODEC COLLATE
		COMMENT CREATE CROSS DATABASE DEFAULT DELETE DESC DETACH DISTINCT DROP ELSE END EPHEMERAL EXCEPT EXISTS EXTRACT
		FALSE FETCH FINAL FIRST FOR FORMAT FROM FULL GLOBAL GROUP HAVING IF ILIKE IN INF INNER INSERT INTERSECT INTERVAL
		INTO IS JOIN KEY LEADING LEFT LIKE LIMIT LOCAL MATERIALIZED NAN NOT NULL NULLS OFFSET ON OR ORDER OUTER OVER
		PARTITION PASTE PREWHERE PRIMARY QUALIFY REPLACE RIGHT SAMPLE SELECT SEMI SETTINGS TABLE TEMPORARY THEN TIES TO
		TOP TOTALS TRAILING TRUE TTL UNION USING VALUES VIEW WHEN WHERE WINDOW WITH`) {
		words[w] = true
	}
	return words
}()
