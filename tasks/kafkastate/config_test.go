package kafkastate

import (
	"errors"
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

func validConfig() Config {
	return Config{
		Topic:           "customers",
		MaxRecords:      DefaultMaxRecords,
		PollSeconds:     DefaultPollSeconds,
		KafkaProperties: `{"bootstrap.servers":"127.0.0.1:9092"}`,
		Postgres:        Postgres{DSN: "postgres://u@127.0.0.1:5432/db"},
	}
}

// TestConfigValidate: the seed's `if not topic or not 1 <= limit <= 100000
// or not 1 <= seconds <= 60: raise ValueError('Invalid topic or batch
// bounds')`, plus the properties and DSN. Every refusal is a configuration
// error (exit 2) that names the variable and its range.
func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   string // "" = valid; else a substring of the error
	}{
		{"defaults", func(*Config) {}, ""},
		{"bounds at the minimum", func(c *Config) { c.MaxRecords, c.PollSeconds = 1, 1 }, ""},
		{"bounds at the maximum", func(c *Config) { c.MaxRecords, c.PollSeconds = 100000, 60 }, ""},
		{"empty topic", func(c *Config) { c.Topic = "" }, "TOPIC"},
		{"topic with a space", func(c *Config) { c.Topic = "a b" }, "TOPIC"},
		{"topic too long", func(c *Config) { c.Topic = strings.Repeat("t", 250) }, "TOPIC"},
		{"max records 0", func(c *Config) { c.MaxRecords = 0 }, "MAX_RECORDS must be 1..100000, got 0"},
		{"max records over", func(c *Config) { c.MaxRecords = 100001 }, "MAX_RECORDS must be 1..100000, got 100001"},
		{"max records negative", func(c *Config) { c.MaxRecords = -5 }, "MAX_RECORDS"},
		{"poll seconds 0", func(c *Config) { c.PollSeconds = 0 }, "POLL_SECONDS must be 1..60, got 0"},
		{"poll seconds over", func(c *Config) { c.PollSeconds = 61 }, "POLL_SECONDS must be 1..60, got 61"},
		{"no properties", func(c *Config) { c.KafkaProperties = "" }, "KAFKA_PROPERTIES"},
		{"bad properties", func(c *Config) { c.KafkaProperties = `{"foo":"bar"}` }, "KAFKA_PROPERTIES"},
		{"no dsn", func(c *Config) { c.Postgres.DSN = "" }, "PG_DSN"},
		{"unparsable dsn", func(c *Config) { c.Postgres.DSN = "postgres://u:p@[::1" }, "PG_DSN"},
		{"on bad record refuse", func(c *Config) { c.OnBadRecord = OnBadRecordRefuse }, ""},
		{"on bad record reject", func(c *Config) { c.OnBadRecord = OnBadRecordReject }, ""},
		{"on bad record skip", func(c *Config) { c.OnBadRecord = "skip" }, `ON_BAD_RECORD "skip": want refuse`},
		{"on bad record upper case", func(c *Config) { c.OnBadRecord = "REJECT" }, "ON_BAD_RECORD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.change(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			testenv.CheckHinted(t, err, Hint, outcome.Config, nil, tt.want)
		})
	}
}

func TestConfigValidateHidesDSNPassword(t *testing.T) {
	c := validConfig()
	c.Postgres.DSN = "postgres://u:hunter2-secret@[::1" // unparsable
	err := c.Validate()
	if err == nil || strings.Contains(err.Error(), "hunter2-secret") {
		t.Fatalf("Validate() = %v; want an error without the password", err)
	}
}

// TestJDBCURLInDSN: the seed flow's KAFKA_STATE_JDBC_URL pasted into
// PG_DSN. pgx read it as a key=value string naming nothing, so setup
// connected to the local socket as the OS user and failed with "failed to
// connect to user=changesink database=: ... Peer authentication failed". It
// is a configuration error before any connection, saying what it is and the
// form to use, without the URL or its password.
func TestJDBCURLInDSN(t *testing.T) {
	for _, dsn := range []string{
		"jdbc:postgresql://127.0.0.1:5432/db?user=u&password=jdbc-Secret-1",
		"JDBC:postgresql://db.example:5432/kestra?password=jdbc-Secret-1&ssl=true",
	} {
		err := Postgres{DSN: dsn, User: "u", Password: "pw"}.Validate()
		testenv.CheckHinted(t, err, Hint, outcome.Config, ErrJDBCURL, "PG_DSN is not a libpq connection string (it is a JDBC URL, as the seed flow's KAFKA_STATE_JDBC_URL)",
			"hint: Use a URL, postgres://user@host:port/database?sslmode=... (the password in PGPASSWORD, or percent-encoded after the user), "+
				"or a key=value string (host=... port=... dbname=... user=... sslmode=...)")
		if err != nil && (strings.Contains(err.Error(), "jdbc-Secret-1") || strings.Contains(err.Error(), "127.0.0.1") || strings.Contains(err.Error(), "db.example")) {
			t.Errorf("Validate(%q) = %v: shows the URL or its password", dsn, err)
		}
	}
}

func TestPostgresConnConfig(t *testing.T) {
	tests := []struct {
		name               string
		pg                 Postgres
		wantUser, wantPass string
	}{
		{"dsn user and password win", Postgres{DSN: "postgres://a:pa@h/db", User: "b", Password: "pb"}, "a", "pa"},
		{"PGUSER/PGPASSWORD fill a bare url", Postgres{DSN: "postgres://h/db", User: "b", Password: "pb"}, "b", "pb"},
		{"user in url, password from PGPASSWORD", Postgres{DSN: "postgres://a@h/db", Password: "pb"}, "a", "pb"},
		{"query parameters count as set", Postgres{DSN: "postgres://h/db?user=q&password=qp", User: "b", Password: "pb"}, "q", "qp"},
		{"keyword form", Postgres{DSN: "host=h dbname=db user=k password='x y'", User: "b", Password: "pb"}, "k", "x y"},
		{"keyword form without user", Postgres{DSN: "host=h dbname=db", User: "b", Password: "pb"}, "b", "pb"},
		{"keyword form with spaces around =", Postgres{DSN: "host = h user = k", User: "b"}, "k", ""},
		// libpq and pgx read a URL's userinfo up to its first '@' (a '#' or
		// '?' in the password is part of it), where Go's url.Parse refuses
		// the URL: PGUSER and PGPASSWORD replaced the DSN's own.
		{"url password with '#' wins", Postgres{DSN: "postgres://a:pa#x@h/db", User: "b", Password: "pb"}, "a", "pa#x"},
		{"url password with '?' wins", Postgres{DSN: "postgres://a:pa?x@h/db?sslmode=disable", User: "b", Password: "pb"}, "a", "pa?x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc, err := tt.pg.connConfig()
			if err != nil {
				t.Fatal(err)
			}
			if cc.User != tt.wantUser || (tt.wantPass != "" && cc.Password != tt.wantPass) {
				t.Errorf("user/password = %q/%q, want %q/%q", cc.User, cc.Password, tt.wantUser, tt.wantPass)
			}
		})
	}
}

// TestDSNPasswordWithAt: a URL whose password holds an unescaped '@'. libpq
// and pgx end the userinfo at the first '@', so the rest of the password
// became the host name: the run failed as transient (exit 3, "retry") with
// "lookup secret42@127.0.0.1: no such host", the password's tail printed.
// It is a configuration error that says to percent-encode it, and names no
// part of the host.
func TestDSNPasswordWithAt(t *testing.T) {
	for _, dsn := range []string{
		"postgres://u:hunter2@secret42@127.0.0.1:5432/db?sslmode=disable",
		"postgresql://u:hunter2@secret42@127.0.0.1/db",
		"postgres://u:hunter2@secret42@h1,h2/db",
	} {
		err := Postgres{DSN: dsn}.Validate()
		if err == nil || outcome.Classify(err) != outcome.Config || !strings.Contains(err.Error(), "%40") || strings.Contains(err.Error(), "secret42") {
			t.Errorf("Validate(%q) = %v (class %v), want a configuration error saying %%40 without the password", dsn, err, outcome.Classify(err))
		}
	}
}

func TestValidateNeedsOnlyWhatACommandUses(t *testing.T) {
	if err := (Postgres{}).Validate(); err == nil || !strings.Contains(err.Error(), "PG_DSN") {
		t.Errorf("Postgres{}.Validate() = %v, want PG_DSN error", err)
	}
	if err := ValidateTopic(""); err == nil || !errors.Is(err, errInvalidTopic) {
		t.Errorf("ValidateTopic(\"\") = %v", err)
	}
}

// TestDSNParseErrorSaysWhat: a PG_DSN pgx cannot parse is reported with
// what is wrong in it, and never with the DSN. The message kept only the
// innermost error, so a missing sslrootcert file said "no such file or
// directory" (not which file, nor that it is the CA file) and a bad
// connect_timeout "invalid syntax"; where the innermost error was pgx's own,
// it quoted the whole DSN, redacted by pgx's pattern (password=...), which a
// keyword/value password written with an escaped space ("password=a\ b")
// passes half unredacted.
func TestDSNParseErrorSaysWhat(t *testing.T) {
	for _, tc := range []struct {
		dsn    string
		says   []string
		secret string
	}{
		{"postgres://u:pw1secret@127.0.0.1/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem", []string{"CA file", "/nonexistent/ca.pem"}, "pw1secret"},
		{"host=127.0.0.1 password=pw2secret sslmode=require sslcert=/nonexistent/c.crt sslkey=/nonexistent/c.key", []string{"sslkey", "/nonexistent/c.key"}, "pw2secret"},
		{"postgres://u:pw3secret@127.0.0.1/db?connect_timeout=abc", []string{"connect_timeout", `"abc"`}, "pw3secret"},
		{`host=127.0.0.1 password=pw4\ secret4 port=x`, []string{"invalid port"}, "secret4"},
		{"host=127.0.0.1 password = pw5secret port=x", []string{"invalid port"}, "pw5secret"},
		{"postgres://u:pw6secret@[::1", []string{`matching "]"`}, "pw6secret"},
		{"host=127.0.0.1 password='pw7secret", []string{"unterminated quoted string"}, "pw7secret"},
	} {
		err := Postgres{DSN: tc.dsn}.Validate()
		testenv.CheckHinted(t, err, Hint, outcome.Config, nil, append([]string{"PG_DSN cannot be parsed"}, tc.says...)...)
		if err != nil && (strings.Contains(err.Error(), tc.secret) || strings.Contains(err.Error(), "127.0.0.1")) {
			t.Errorf("Validate(%q) = %v: shows the DSN or its password", tc.dsn, err)
		}
	}
}
