package redact

import (
	"strings"
	"testing"
)

func TestMasker(t *testing.T) {
	var m Masker
	m.Add("pa ss/word", "x") // "x" is too short to mask
	m.AddDSN("postgres://u:dsnsecret@h/db")
	m.AddDSN("host=h password='kv secret'")
	m.AddDSN("postgres://u@h/db?sslpassword=url-keypass")
	m.AddDSN("host=h sslpassword=kv-keypass password=kv2secret")
	m.AddDSN("clickhouse://u:bad%zzsecret@h:9000/db") // url.Parse refuses the escape
	m.AddDSN("clickhouse://u:p@ss@h:9000/db?x=%zz")   // an @ in the password, and no parse
	in := "a pa ss/word b pa+ss%2Fword c pa%20ss%2Fword d dsnsecret e kv secret f url-keypass g kv-keypass h kv2secret i bad%zzsecret j p@ss x"
	got := m.Mask(in)
	for _, s := range []string{"pa ss/word", "pa+ss%2Fword", "pa%20ss%2Fword", "dsnsecret", "kv secret", "url-keypass", "kv-keypass", "kv2secret", "bad%zzsecret", "p@ss"} {
		if strings.Contains(got, s) {
			t.Errorf("Mask left %q in %q", s, got)
		}
	}
	if !strings.HasSuffix(got, " x") {
		t.Errorf("Mask changed a short non-secret: %q", got)
	}
	var zero Masker
	if zero.Mask("abc") != "abc" {
		t.Error("zero Masker must not change text")
	}
}

// TestMaskerURLPasswordWithReservedCharacters: a URL password holding an
// unescaped '@', '?' or '#'. libpq and pgx end the userinfo at the first '@'
// ("hunter2"), so the rest of the password becomes the host and reaches the
// connect error ("lookup secret42@127.0.0.1: no such host"); Go's url.Parse
// ends it at the last '@' or refuses the URL. Every reading is masked.
func TestMaskerURLPasswordWithReservedCharacters(t *testing.T) {
	for _, tc := range []struct {
		dsn     string
		printed string
		secrets []string
	}{
		{"postgres://changesink:hunter2@secret42@127.0.0.1:5432/db?sslmode=disable",
			"hostname resolving error: lookup secret42@127.0.0.1: no such host", []string{"hunter2", "secret42"}},
		{"postgres://changesink:hunter2@secret42@127.0.0.1:5432/db?sslmode=disable",
			"password hunter2@secret42", []string{"hunter2@secret42", "secret42"}},
		{"postgres://changesink:hunter2?secret42@127.0.0.1/db", "password hunter2?secret42", []string{"hunter2?secret42"}},
		{"postgres://changesink:hunter2#secret42@127.0.0.1/db", "password hunter2#secret42", []string{"hunter2#secret42"}},
	} {
		var m Masker
		m.AddDSN(tc.dsn)
		got := m.Mask(tc.printed)
		for _, s := range tc.secrets {
			if strings.Contains(got, s) {
				t.Errorf("AddDSN(%q): Mask(%q) = %q, still shows %q", tc.dsn, tc.printed, got, s)
			}
		}
	}
}

func TestJDBCURL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"jdbc:postgresql://127.0.0.1:5432/db?password=s3cret", true},
		{"JDBC:clickhouse://h:8123/default", true},
		{"  jdbc:postgresql://h/db", true},
		{"jdbc:", true},
		{"postgres://u@h:5432/db?sslmode=disable", false},
		{"host=h dbname=jdbc", false},
		{"jdb", false},
		{"", false},
	} {
		if got := JDBCURL(tc.in); got != tc.want {
			t.Errorf("JDBCURL(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
