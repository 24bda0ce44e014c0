// Package redact keeps secrets out of everything changesink prints.
//
// Masker replaces every known secret value (passwords, SASL secrets, key
// passwords, the passwords inside DSNs and JDBC URLs) wherever it appears, on
// every line changesink prints, including driver errors that quote a DSN or
// a server's echo of a credential.
package redact

import (
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// Placeholder replaces a secret.
const Placeholder = "xxxxx"

// Masker replaces known secret values in text. The zero value masks nothing.
// Add all secrets before sharing it between goroutines.
type Masker struct {
	secrets []string
	r       *strings.Replacer
}

// Add registers secret values. Values shorter than 3 bytes are ignored (they
// would mask ordinary words and digits and protect nothing worth hiding).
func (m *Masker) Add(values ...string) {
	for _, v := range values {
		if len(v) < 3 {
			continue
		}
		m.secrets = append(m.secrets, v)
		if e := url.QueryEscape(v); e != v {
			m.secrets = append(m.secrets, e)
		}
		if e := url.PathEscape(v); e != v {
			m.secrets = append(m.secrets, e)
		}
	}
	// Longest first, so a secret that contains another is masked whole.
	sort.Slice(m.secrets, func(i, j int) bool { return len(m.secrets[i]) > len(m.secrets[j]) })
	pairs := make([]string, 0, 2*len(m.secrets))
	for _, s := range m.secrets {
		pairs = append(pairs, s, Placeholder)
	}
	m.r = strings.NewReplacer(pairs...)
}

// AddDSN registers the password found in a DSN (URL or key=value form),
// and its sslpassword (the passphrase of a client key, libpq's name). The
// password of scheme://user:password@host is found even when the URL does
// not parse, so a mistyped URL cannot carry it into an error message; one
// holding an unescaped '@', '?' or '#' is registered in every reading (see
// urlPasswords).
func (m *Masker) AddDSN(dsn string) {
	m.Add(dsnSecrets(dsn)...)
	m.Add(urlPasswords(dsn)...)
}

// Mask returns s with every registered secret replaced by Placeholder.
func (m *Masker) Mask(s string) string {
	if m == nil || m.r == nil {
		return s
	}
	return m.r.Replace(s)
}

// JDBCURL reports a JDBC URL (jdbc:postgresql://..., jdbc:clickhouse://...),
// the form the seed flows' secrets hold, which no Go driver reads (pgx takes
// one for a key=value string, clickhouse-go refuses it). A message about one
// says so and shows the form to use without quoting it: its password may sit
// in its query (password=...).
func JDBCURL(s string) bool {
	t := strings.TrimSpace(s)
	return len(t) >= len("jdbc:") && strings.EqualFold(t[:len("jdbc:")], "jdbc:")
}

var kvPassword = regexp.MustCompile(`(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// isSecretParam reports a DSN query parameter that holds a secret.
func isSecretParam(k string) bool {
	return strings.EqualFold(k, "password") || strings.EqualFold(k, "sslpassword")
}

func dsnSecrets(dsn string) []string {
	var out []string
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" && u.Host != "" {
		if p, ok := u.User.Password(); ok && p != "" {
			out = append(out, p)
		}
		for k, v := range u.Query() {
			if isSecretParam(k) && len(v) > 0 && v[0] != "" {
				out = append(out, v[0])
			}
		}
		return out
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		p := m[2]
		if strings.HasPrefix(p, "'") && strings.HasSuffix(p, "'") && len(p) >= 2 {
			p = strings.ReplaceAll(p[1:len(p)-1], `\'`, `'`)
		}
		out = append(out, p)
	}
	return out
}

// urlPasswords finds the password of scheme://user:password@host/... by its
// punctuation alone, for URLs that url.Parse refuses, in every reading of a
// password that holds an unescaped '@', '?' or '#': the userinfo runs to the
// last '@' before the first '/' (a '?' or '#' before that '@' is part of the
// password: libpq, pgx); libpq and pgx end it at the first '@', which makes
// the rest of the password the host (printed by a connect error); so the
// password to the last '@' and each of its '@'-separated parts are returned.
func urlPasswords(dsn string) []string {
	_, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return nil
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest = rest[:i]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return nil
	}
	_, password, ok := strings.Cut(rest[:at], ":")
	if !ok || password == "" {
		return nil
	}
	out := []string{password}
	if parts := strings.Split(password, "@"); len(parts) > 1 {
		out = append(out, parts...)
	}
	return out
}
