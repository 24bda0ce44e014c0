package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"
)

// RandomHex returns n random bytes in hex (2n characters): a suffix that
// keeps names apart across tests, processes and checkouts sharing a service.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

var unsafeName = regexp.MustCompile(`[^a-z0-9]+`)

// UniqueName makes a topic, database, table or role name for t: prefix, the
// last 40 characters of the test's name (lower case, runs of other
// characters as "_"), and 8 random hex digits, e.g.
// "ks_testlockwait_3f9a01bc". At most len(prefix)+50 characters, safe
// unquoted in PostgreSQL, ClickHouse and Kafka.
func UniqueName(t testing.TB, prefix string) string {
	base := unsafeName.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(base) > 40 {
		base = base[len(base)-40:]
	}
	return strings.Trim(prefix+strings.Trim(base, "_")+"_"+RandomHex(4), "_")
}
