package kafkastate

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// TestTLS: materialize over the broker's TLS listeners with the settings a
// flow's secret carries, against PostgreSQL over TLS, and the failures
// where only the TLS settings are wrong: each is a configuration error that
// names the broker or the setting, changes no table, and a run with the
// right settings afterwards reads what the failed ones left. The
// command-line view of the same (provider-style secrets, secrets kept out
// of the output) is cmd/changesink's TestKafkaStateOverTLS.
func TestTLS(t *testing.T) {
	vars := testenv.Lookup(t, "CHANGESINK_TEST_KAFKA_SSL", "CHANGESINK_TEST_KAFKA_SASL_SSL", "CHANGESINK_TEST_KAFKA_MTLS",
		"CHANGESINK_TEST_KAFKA_PLAIN_USER", "CHANGESINK_TEST_KAFKA_PLAIN_PASSWORD",
		"CHANGESINK_TEST_KAFKA_SCRAM_USER", "CHANGESINK_TEST_KAFKA_SCRAM_PASSWORD",
		"CHANGESINK_TEST_TLS_DIR", "CHANGESINK_TEST_TLS_CA", "CHANGESINK_TEST_TLS_OTHER_CA")
	e := newTopicEnv(t, 2)
	dir := vars["CHANGESINK_TEST_TLS_DIR"]
	ca, otherCA := vars["CHANGESINK_TEST_TLS_CA"], vars["CHANGESINK_TEST_TLS_OTHER_CA"]
	props := func(kv map[string]string) string {
		b, err := json.Marshal(kv)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	saslCA := func(mech, user, password, caFile string) string {
		return props(map[string]string{"bootstrap.servers": vars["CHANGESINK_TEST_KAFKA_SASL_SSL"], "security.protocol": "SASL_SSL",
			"sasl.mechanism": mech, "sasl.username": user, "sasl.password": password, "ssl.ca.location": caFile})
	}
	sasl := func(mech, user, password string) string { return saslCA(mech, user, password, ca) }
	plainUser, plainPW := vars["CHANGESINK_TEST_KAFKA_PLAIN_USER"], vars["CHANGESINK_TEST_KAFKA_PLAIN_PASSWORD"]
	scramUser, scramPW := vars["CHANGESINK_TEST_KAFKA_SCRAM_USER"], vars["CHANGESINK_TEST_KAFKA_SCRAM_PASSWORD"]
	// PostgreSQL over TLS: verify-ca checks the chain, not the host name.
	pgTLS := func(mode, rootCert string) Postgres {
		p := e.pg
		p.DSN = testenv.WithParams(t, p.DSN, map[string]string{"sslmode": mode, "sslrootcert": rootCert})
		return p
	}

	ok := []struct {
		name, props string
		pg          Postgres
	}{
		{"SASL_SSL PLAIN", sasl("PLAIN", plainUser, plainPW), pgTLS("verify-full", ca)},
		{"SASL_SSL SCRAM-SHA-256", sasl("SCRAM-SHA-256", scramUser, scramPW), pgTLS("verify-ca", ca)},
		{"SASL_SSL SCRAM-SHA-512", sasl("SCRAM-SHA-512", scramUser, scramPW), pgTLS("require", ca)},
		{"SSL, host name not checked", props(map[string]string{"bootstrap.servers": vars["CHANGESINK_TEST_KAFKA_SSL"], "security.protocol": "SSL",
			"ssl.ca.location": ca, "ssl.endpoint.identification.algorithm": "none"}), e.pg},
		{"SSL, a directory of CA files", props(map[string]string{"bootstrap.servers": vars["CHANGESINK_TEST_KAFKA_SSL"], "security.protocol": "SSL",
			"ssl.ca.location": caDir(t, ca, otherCA)}), e.pg},
		{"mutual TLS", props(map[string]string{"bootstrap.servers": vars["CHANGESINK_TEST_KAFKA_MTLS"], "security.protocol": "SSL",
			"ssl.ca.location": ca, "ssl.certificate.location": filepath.Join(dir, "client.crt"), "ssl.key.location": filepath.Join(dir, "client.key")}), e.pg},
	}
	for i, tt := range ok {
		t.Run(tt.name, func(t *testing.T) {
			produce(t, e.kcl, e.topic, kv(int32(i%2), "k"+tt.name, `{"i":1}`))
			cfg := e.config()
			cfg.KafkaProperties, cfg.Postgres = tt.props, tt.pg
			res, err := e.run(t, cfg, hooks{})
			if err != nil {
				t.Fatalf("materialize: %v", err)
			}
			if res.Consumed != 1 {
				t.Errorf("consumed %d, want 1", res.Consumed)
			}
		})
	}

	produce(t, e.kcl, e.topic, kv(0, "after-failures", `{"i":2}`))
	bad := []struct {
		name, props string
		pg          Postgres
		want        []string
	}{
		{"broker certificate from another CA", saslCA("SCRAM-SHA-512", scramUser, scramPW, otherCA), e.pg,
			[]string{vars["CHANGESINK_TEST_KAFKA_SASL_SSL"], "certificate signed by unknown authority", "ssl.ca.location"}},
		{"wrong SCRAM password over TLS", sasl("SCRAM-SHA-256", scramUser, "not-the-"+scramPW), e.pg,
			[]string{vars["CHANGESINK_TEST_KAFKA_SASL_SSL"], "SASL_AUTHENTICATION_FAILED", "sasl.password"}},
		{"wrong PLAIN password over TLS", sasl("PLAIN", plainUser, "not-the-"+plainPW), e.pg,
			[]string{vars["CHANGESINK_TEST_KAFKA_SASL_SSL"], "SASL_AUTHENTICATION_FAILED"}},
		{"client certificate from another CA", props(map[string]string{"bootstrap.servers": vars["CHANGESINK_TEST_KAFKA_MTLS"], "security.protocol": "SSL",
			"ssl.ca.location": ca, "ssl.certificate.location": filepath.Join(dir, "other-client.crt"), "ssl.key.location": filepath.Join(dir, "other-client.key")}), e.pg,
			[]string{vars["CHANGESINK_TEST_KAFKA_MTLS"], "ssl.certificate.location"}},
		{"plaintext client on a TLS listener", props(map[string]string{"bootstrap.servers": vars["CHANGESINK_TEST_KAFKA_SSL"]}), e.pg,
			[]string{vars["CHANGESINK_TEST_KAFKA_SSL"], "tls alert", "set security.protocol to SSL or SASL_SSL"}},
		{"PostgreSQL certificate from another CA (verify-ca)", props(map[string]string{"bootstrap.servers": vars["CHANGESINK_TEST_KAFKA_SSL"], "security.protocol": "SSL",
			"ssl.ca.location": ca}), pgTLS("verify-ca", otherCA), []string{e.pgAddr(t), "sslrootcert"}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			before := e.snapshot(t)
			cfg := e.config()
			cfg.KafkaProperties, cfg.Postgres = tt.props, tt.pg
			_, err := e.run(t, cfg, hooks{})
			testenv.WantHinted(t, err, Hint, outcome.Config, nil)
			testenv.CheckHinted(t, err, Hint, outcome.Config, nil, tt.want...) // and go on to the passwords and the tables
			for _, pw := range []string{plainPW, scramPW} {
				if strings.Contains(err.Error(), pw) {
					t.Errorf("error shows a password: %v", err)
				}
			}
			if e.snapshot(t) != before {
				t.Error("tables changed")
			}
		})
	}
	cfg := e.config()
	cfg.KafkaProperties = sasl("SCRAM-SHA-512", scramUser, scramPW)
	if res, err := e.run(t, cfg, hooks{}); err != nil || res.Consumed != 1 {
		t.Fatalf("after the failures: %+v, %v; want the one record they left", res, err)
	}
}

// caDir makes a directory holding copies of the CA files (ssl.ca.location
// may name one, as librdkafka's does).
func caDir(t *testing.T, files ...string) string {
	t.Helper()
	d := t.TempDir()
	for i, f := range files {
		b := testenv.ReadFile(t, f)
		testenv.WriteFile(t, filepath.Join(d, fmt.Sprintf("ca%d.pem", i)), b, 0o644)
	}
	return d
}
