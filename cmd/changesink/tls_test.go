package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/kafkastate"
)

// The tests below run the built binary the way a Kestra flow does: only the
// env the flow's task sets (the secrets as a user writes them), the working
// directory as the current directory (files from inputFiles, such as a CA
// certificate, are given by relative paths), stdout and stderr captured
// apart. They use the TLS listeners .ci/services starts with the
// certificates of .ci/tls.

// flowCommand is bin run as a flow's task runs it: with exactly env (plus
// the working directory, work) in work.
func flowCommand(ctx context.Context, bin, work string, env map[string]string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = work
	cmd.Env = []string{kestra.EnvWorkingDir + "=" + work}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

// runAsFlow runs bin as a flow's task does (flowCommand) to its end.
func runAsFlow(ctx context.Context, t *testing.T, bin, work string, env map[string]string, args ...string) testenv.Result {
	t.Helper()
	r, err := testenv.Run(flowCommand(ctx, bin, work, env, args...))
	if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return r
}

// copyFile copies src to dir/name (mode 0600) and returns name.
func copyFile(t *testing.T, src, dir, name string) string {
	t.Helper()
	testenv.WriteFile(t, filepath.Join(dir, name), testenv.ReadFile(t, src), 0o600)
	return name
}

// jsonObject renders a KAFKA_PROPERTIES secret.
func jsonObject(t *testing.T, kv map[string]string) string {
	t.Helper()
	b, err := json.Marshal(kv)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tlsSecretCheck collects everything the runs printed and the values that
// must never appear in it.
type tlsSecretCheck struct {
	all     strings.Builder
	secrets map[string]string // name → value
}

func (c *tlsSecretCheck) add(r testenv.Result) { c.all.WriteString(r.Output()) }

func (c *tlsSecretCheck) verify(t *testing.T) {
	t.Helper()
	out := c.all.String()
	for name, v := range c.secrets {
		if v != "" && strings.Contains(out, v) {
			t.Errorf("the output shows the %s", name)
		}
	}
	if t.Failed() {
		t.Logf("all output:\n%s", out)
	}
}

// TestKafkaStateOverTLS runs setup, materialize and verify with the
// secrets a user of Confluent Cloud, Amazon MSK or Aiven writes: Kafka over
// SASL_SSL with PLAIN, SCRAM-SHA-512 and SCRAM-SHA-256, over SSL with the
// CA in the secret, and over mutual TLS with a client certificate (files
// and PEM strings); PostgreSQL with sslmode=verify-full and sslrootcert in
// KAFKA_STATE_DSN. Then a wrong CA and a wrong password for each service,
// a TLS client on a plaintext port, and a mutual-TLS listener without a
// client certificate: each exits 2 (config) with a message naming the host
// and what to fix. Nothing printed (stdout or stderr) shows a password, a
// key or a whole KAFKA_PROPERTIES value; stderr stays empty.
func TestKafkaStateOverTLS(t *testing.T) {
	vars := testenv.Lookup(t, "CHANGESINK_TEST_PG", "CHANGESINK_TEST_PG_TLS_HOSTPORT", "CHANGESINK_TEST_KAFKA",
		"CHANGESINK_TEST_KAFKA_SSL", "CHANGESINK_TEST_KAFKA_SASL_SSL", "CHANGESINK_TEST_KAFKA_MTLS",
		"CHANGESINK_TEST_KAFKA_PLAIN_USER", "CHANGESINK_TEST_KAFKA_PLAIN_PASSWORD",
		"CHANGESINK_TEST_KAFKA_SCRAM_USER", "CHANGESINK_TEST_KAFKA_SCRAM_PASSWORD",
		"CHANGESINK_TEST_TLS_DIR", "CHANGESINK_TEST_TLS_CA", "CHANGESINK_TEST_TLS_OTHER_CA")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := testenv.BuildChangesink(t)
	tlsDir := vars["CHANGESINK_TEST_TLS_DIR"]

	// PostgreSQL: a role with a password of its own and its database.
	suffix := testenv.RandomHex(4)
	role, db := "ks_tls_"+suffix, "ks_tls_"+suffix
	pgSecret := "pg-Tls-" + testenv.RandomHex(6)
	testenv.CreateRole(t, vars["CHANGESINK_TEST_PG"], role, pgSecret)
	testenv.CreateDatabase(t, vars["CHANGESINK_TEST_PG"], db, role)

	// Kafka: a compacted topic, written over the plaintext listener.
	kcl, topic := kafkaTopic(t, vars["CHANGESINK_TEST_KAFKA"], "ks_tls_", 2)
	seq := 0
	produceOne := func() {
		t.Helper()
		seq++
		r := &kgo.Record{Topic: topic, Partition: int32(seq % 2), Key: fmt.Appendf(nil, "k%d", seq), Value: fmt.Appendf(nil, `{"n":%d}`, seq)}
		if err := kcl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// The working directory as a flow's inputFiles would fill it.
	work := t.TempDir()
	caFile := copyFile(t, vars["CHANGESINK_TEST_TLS_CA"], work, "ca.pem")
	otherCAFile := copyFile(t, vars["CHANGESINK_TEST_TLS_OTHER_CA"], work, "other-ca.pem")
	certFile := copyFile(t, filepath.Join(tlsDir, "client.crt"), work, "service.cert")
	keyFile := copyFile(t, filepath.Join(tlsDir, "client.key"), work, "service.key")
	caPEM := string(testenv.ReadFile(t, vars["CHANGESINK_TEST_TLS_CA"]))
	certPEM := string(testenv.ReadFile(t, filepath.Join(tlsDir, "client.crt")))
	keyPEM := string(testenv.ReadFile(t, filepath.Join(tlsDir, "client.key")))

	plainUser, plainSecret := vars["CHANGESINK_TEST_KAFKA_PLAIN_USER"], vars["CHANGESINK_TEST_KAFKA_PLAIN_PASSWORD"]
	scramUser, scramSecret := vars["CHANGESINK_TEST_KAFKA_SCRAM_USER"], vars["CHANGESINK_TEST_KAFKA_SCRAM_PASSWORD"]
	wrongKafka := "wrong-Kafka-" + testenv.RandomHex(6)
	wrongPG := "wrong-PG-" + testenv.RandomHex(6)
	saslSSL, sslAddr, mtls := vars["CHANGESINK_TEST_KAFKA_SASL_SSL"], vars["CHANGESINK_TEST_KAFKA_SSL"], vars["CHANGESINK_TEST_KAFKA_MTLS"]

	// KAFKA_STATE_PROPERTIES as each provider's documentation has users
	// write it. Confluent Cloud and MSK brokers have certificates from
	// public CAs, so their configs name no CA: the run trusts the system
	// store, which SSL_CERT_FILE points at the CI CA here (the stand-in for
	// the public CA).
	confluent := func(password string) string {
		return jsonObject(t, map[string]string{"bootstrap.servers": saslSSL, "security.protocol": "SASL_SSL",
			"sasl.mechanisms": "PLAIN", "sasl.username": plainUser, "sasl.password": password,
			"session.timeout.ms": "45000", "client.id": "ccloud-python-client-changesink"})
	}
	msk := jsonObject(t, map[string]string{"bootstrap.servers": saslSSL, "security.protocol": "SASL_SSL",
		"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": scramUser, "sasl.password": scramSecret})
	aivenSASL := func(ca string) string {
		return jsonObject(t, map[string]string{"bootstrap.servers": saslSSL, "security.protocol": "SASL_SSL",
			"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": scramUser, "sasl.password": scramSecret,
			"ssl.ca.location": ca, "ssl.endpoint.identification.algorithm": "https"})
	}
	aivenCert := jsonObject(t, map[string]string{"bootstrap.servers": mtls, "security.protocol": "SSL",
		"ssl.ca.location": caFile, "ssl.certificate.location": certFile, "ssl.key.location": keyFile})
	pemCert := jsonObject(t, map[string]string{"bootstrap.servers": mtls, "security.protocol": "SSL",
		"ssl.ca.pem": caPEM, "ssl.certificate.pem": certPEM, "ssl.key.pem": keyPEM})
	sslCAPEM := jsonObject(t, map[string]string{"bootstrap.servers": sslAddr, "security.protocol": "SSL", "ssl.ca.pem": caPEM})
	noClientCert := jsonObject(t, map[string]string{"bootstrap.servers": mtls, "security.protocol": "SSL", "ssl.ca.location": caFile})
	tlsOnPlaintext := jsonObject(t, map[string]string{"bootstrap.servers": vars["CHANGESINK_TEST_KAFKA"], "security.protocol": "SSL", "ssl.ca.location": caFile})

	// KAFKA_STATE_DSN, KAFKA_STATE_USER, KAFKA_STATE_PASSWORD.
	dsn := func(rootCert string) string {
		u := url.URL{Scheme: "postgres", Host: vars["CHANGESINK_TEST_PG_TLS_HOSTPORT"], Path: "/" + db,
			RawQuery: url.Values{"sslmode": {"verify-full"}, "sslrootcert": {rootCert}}.Encode()}
		return u.String()
	}
	base := map[string]string{kafkastate.EnvPGDSN: dsn(caFile), kafkastate.EnvPGUser: role, kafkastate.EnvPGPassword: pgSecret, kafkastate.EnvTopic: topic, kafkastate.EnvKafkaProperties: confluent(plainSecret)}
	with := func(extra ...string) map[string]string { return withEnv(base, extra...) }

	check := &tlsSecretCheck{secrets: map[string]string{
		"PostgreSQL password": pgSecret, "wrong PostgreSQL password": wrongPG, "PLAIN password": plainSecret,
		"SCRAM password": scramSecret, "wrong Kafka password": wrongKafka, "client key": strings.TrimSpace(keyPEM),
		"client key body": strings.Split(strings.TrimSpace(keyPEM), "\n")[1],
	}}
	for i, props := range []string{confluent(plainSecret), confluent(wrongKafka), msk, aivenSASL(caFile), aivenSASL(otherCAFile), aivenCert, pemCert} {
		check.secrets[fmt.Sprintf("KAFKA_PROPERTIES value %d", i)] = props
	}
	step := func(name string, wantCode int, wants []string, env map[string]string, args ...string) {
		t.Helper()
		flowStep(ctx, t, bin, work, check, name, wantCode, wants, env, args...)
	}
	systemCAValue := vars["CHANGESINK_TEST_TLS_CA"]

	step("setup (PostgreSQL verify-full)", 0, []string{`"schema":"kafka_state"`}, base, "kafka-state", "setup")
	for _, s := range []struct {
		name  string
		props string
		env   []string
	}{
		{"Confluent Cloud style: SASL_SSL, PLAIN, system trust store", confluent(plainSecret), []string{"SSL_CERT_FILE", systemCAValue}},
		{"Amazon MSK style: SASL_SSL, SCRAM-SHA-512, system trust store", msk, []string{"SSL_CERT_FILE", systemCAValue}},
		{"Aiven style: SASL_SSL, SCRAM-SHA-256, ssl.ca.location", aivenSASL(caFile), nil},
		{"Aiven style: SSL with a client certificate (files)", aivenCert, nil},
		{"SSL with a client certificate and the CA as PEM strings", pemCert, nil},
		{"SSL, server authentication only, ssl.ca.pem", sslCAPEM, nil},
	} {
		produceOne()
		step("materialize: "+s.name, 0, []string{`"consumed":1`},
			with(append([]string{kafkastate.EnvKafkaProperties, s.props}, s.env...)...), "kafka-state", "materialize")
	}
	step("verify (PostgreSQL verify-full)", 0, []string{`"valid":true`}, base, "kafka-state", "verify")

	// Failures a user meets: each a configuration error naming the host.
	produceOne()
	step("Kafka: wrong CA", 2, []string{`"error_class":"config"`, saslSSL, "ssl.ca.location", "certificate signed by unknown authority"},
		with(kafkastate.EnvKafkaProperties, aivenSASL(otherCAFile)), "kafka-state", "materialize")
	step("Kafka: no CA given, the system trust store lacks it", 2, []string{`"error_class":"config"`, saslSSL, "system trust store"},
		with("SSL_CERT_FILE", filepath.Join(work, otherCAFile)), "kafka-state", "materialize")
	step("Kafka: wrong SASL password", 2, []string{`"error_class":"config"`, saslSSL, "sasl.password"},
		with(kafkastate.EnvKafkaProperties, confluent(wrongKafka), "SSL_CERT_FILE", systemCAValue), "kafka-state", "materialize")
	step("Kafka: mutual-TLS listener, no client certificate", 2, []string{`"error_class":"config"`, mtls, "ssl.certificate.location"},
		with(kafkastate.EnvKafkaProperties, noClientCert), "kafka-state", "materialize")
	step("Kafka: TLS against the plaintext listener", 2, []string{`"error_class":"config"`, vars["CHANGESINK_TEST_KAFKA"], "security.protocol"},
		with(kafkastate.EnvKafkaProperties, tlsOnPlaintext), "kafka-state", "materialize")
	// franz-go reports this one as text alone: a first answer whose size
	// bytes are a TLS alert record (type 21, version 3.x), which no Kafka
	// answer under franz-go's size limit can be.
	step("Kafka: plaintext against a TLS listener", 2, []string{`"error_class":"config"`, sslAddr, "tls alert", "set security.protocol to SSL or SASL_SSL"},
		with(kafkastate.EnvKafkaProperties, jsonObject(t, map[string]string{"bootstrap.servers": sslAddr})), "kafka-state", "materialize")
	step("PostgreSQL: wrong CA", 2, []string{`"error_class":"config"`, "localhost", "sslrootcert", "certificate signed by unknown authority"},
		with(kafkastate.EnvPGDSN, dsn(otherCAFile)), "kafka-state", "setup")
	step("PostgreSQL: wrong CA (materialize)", 2, []string{`"error_class":"config"`, "sslrootcert"},
		with(kafkastate.EnvPGDSN, dsn(otherCAFile), kafkastate.EnvKafkaProperties, sslCAPEM), "kafka-state", "materialize")
	step("PostgreSQL: wrong password over TLS", 2, []string{`"error_class":"config"`, "localhost", "Check PG_DSN"},
		with(kafkastate.EnvPGPassword, wrongPG), "kafka-state", "verify")
	// Nothing of the failed runs was committed: the record produced before
	// them is read now, once.
	step("materialize after the failures", 0, []string{`"consumed":1`}, with(kafkastate.EnvKafkaProperties, sslCAPEM), "kafka-state", "materialize")
	check.verify(t)
}

// TestCDCOverTLS runs cdc setup and apply on ClickHouse's TLS port
// (secure=true) with the CLICKHOUSE_USERNAME and CLICKHOUSE_PASSWORD
// secrets: the CA given as CLICKHOUSE_CA_FILE (a file the flow puts in the
// working directory), and with no CA setting through the system trust
// store (SSL_CERT_FILE, the stand-in for a public CA). Then a wrong CA
// (either way), a wrong password, the TLS port without secure=true (setup
// and apply) and CLICKHOUSE_CA_FILE without secure=true: each exits 2
// (config) naming the server and what to fix, and nothing printed shows
// the password; stderr stays empty.
func TestCDCOverTLS(t *testing.T) {
	testenv.ClickHouseHas(t, testenv.ClickHouseTLS)
	testenv.ClickHouseHas(t, testenv.ClickHouseUsers)
	vars := testenv.Lookup(t, "CHANGESINK_TEST_CLICKHOUSE", "CHANGESINK_TEST_CLICKHOUSE_SECURE",
		"CHANGESINK_TEST_CLICKHOUSE_USER", "CHANGESINK_TEST_CLICKHOUSE_PASSWORD",
		"CHANGESINK_TEST_TLS_CA", "CHANGESINK_TEST_TLS_OTHER_CA")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := testenv.BuildChangesink(t)
	_, _, db, work := cdcWorkspace(t, "cdc_tls_")
	cdcBatch(t, filepath.Join(work, "changes.ion"), false, "paid")
	caFile := copyFile(t, vars["CHANGESINK_TEST_TLS_CA"], work, "clickhouse-ca.pem")
	otherCAFile := copyFile(t, vars["CHANGESINK_TEST_TLS_OTHER_CA"], work, "other-ca.pem")
	secure, password := vars["CHANGESINK_TEST_CLICKHOUSE_SECURE"], vars["CHANGESINK_TEST_CLICKHOUSE_PASSWORD"]
	wrong := "wrong-CH-" + testenv.RandomHex(6)
	secureURL, err := url.Parse(secure)
	if err != nil {
		t.Fatal(err)
	}
	host := secureURL.Host // the TLS port, named by every connection error
	plain := *secureURL    // the TLS port without secure=true
	q := plain.Query()
	q.Del("secure")
	plain.RawQuery = q.Encode()
	plainOnTLS := plain.String()

	base := map[string]string{"CDC_MAPPING": "orders.mapping.yaml", "CLICKHOUSE_URL": secure, "CLICKHOUSE_CA_FILE": caFile,
		"CLICKHOUSE_USERNAME": vars["CHANGESINK_TEST_CLICKHOUSE_USER"], "CLICKHOUSE_PASSWORD": password}
	with := func(extra ...string) map[string]string { return withEnv(base, extra...) }
	check := &tlsSecretCheck{secrets: map[string]string{"ClickHouse password": password, "wrong ClickHouse password": wrong}}
	step := func(name string, wantCode int, wants []string, env map[string]string, args ...string) {
		t.Helper()
		flowStep(ctx, t, bin, work, check, name, wantCode, wants, env, args...)
	}

	step("setup over TLS, CLICKHOUSE_CA_FILE", 0, []string{`"table":"` + db + `.orders_cdc"`}, base, "cdc", "setup")
	step("apply over TLS, CLICKHOUSE_CA_FILE", 0, []string{`"pending":2`, `"verified":2`}, base, "cdc", "apply")
	step("apply over TLS, system trust store (SSL_CERT_FILE)", 0, []string{`"skipped":2`, `"verified":2`},
		with("CLICKHOUSE_CA_FILE", "", "SSL_CERT_FILE", vars["CHANGESINK_TEST_TLS_CA"]), "cdc", "apply")

	step("wrong CA (CLICKHOUSE_CA_FILE)", 2, []string{`"error_class":"config"`, host, "certificate signed by unknown authority", "CLICKHOUSE_CA_FILE"},
		with("CLICKHOUSE_CA_FILE", otherCAFile), "cdc", "apply")
	step("wrong CA (system trust store)", 2, []string{`"error_class":"config"`, host, "certificate signed by unknown authority", "system trust store"},
		with("CLICKHOUSE_CA_FILE", "", "SSL_CERT_FILE", filepath.Join(work, otherCAFile)), "cdc", "setup")
	step("wrong password over TLS", 2, []string{`"error_class":"config"`, host, "CLICKHOUSE_PASSWORD"},
		with("CLICKHOUSE_PASSWORD", wrong), "cdc", "apply")
	// The TLS port without secure=true: the server resets the plaintext
	// hello; a TLS probe of the port says why (it was transient, exit 3).
	for _, cmd := range []string{"setup", "apply"} {
		step("plaintext against the TLS port ("+cmd+")", 2, []string{`"error_class":"config"`, host, "speaks TLS", "add secure=true to CLICKHOUSE_URL"},
			with("CLICKHOUSE_URL", plainOnTLS, "CLICKHOUSE_CA_FILE", ""), "cdc", cmd)
	}
	step("CLICKHOUSE_CA_FILE without secure=true", 2, []string{`"error_class":"config"`, "CLICKHOUSE_CA_FILE", "secure=true"},
		with("CLICKHOUSE_URL", vars["CHANGESINK_TEST_CLICKHOUSE"]), "cdc", "setup")
	step("CLICKHOUSE_CA_FILE missing", 2, []string{`"error_class":"config"`, "CLICKHOUSE_CA_FILE", "no-such-ca.pem"},
		with("CLICKHOUSE_CA_FILE", "no-such-ca.pem"), "cdc", "setup")
	check.verify(t)
}

// withEnv returns base with the extra name, value pairs set; an empty value
// removes the name.
func withEnv(base map[string]string, extra ...string) map[string]string {
	env := maps.Clone(base)
	for i := 0; i+1 < len(extra); i += 2 {
		if extra[i+1] == "" {
			delete(env, extra[i])
			continue
		}
		env[extra[i]] = extra[i+1]
	}
	return env
}

// flowStep runs one command as a flow would (runAsFlow), adds its output to
// check, and asserts its exit code, that stdout holds each of wants, and
// that stderr is empty (Kestra shows stderr as ERROR).
func flowStep(ctx context.Context, t *testing.T, bin, work string, check *tlsSecretCheck, name string, wantCode int, wants []string,
	env map[string]string, args ...string) {
	t.Helper()
	r := runAsFlow(ctx, t, bin, work, env, args...)
	check.add(r)
	if r.Code != wantCode {
		t.Errorf("%s: exit %d, want %d; stdout:\n%s\nstderr:\n%s", name, r.Code, wantCode, r.Stdout, r.Stderr)
	}
	for _, w := range wants {
		if !strings.Contains(r.Stdout, w) {
			t.Errorf("%s: stdout lacks %q:\n%s", name, w, r.Stdout)
		}
	}
	if r.Stderr != "" {
		t.Errorf("%s: stderr is not empty: %s", name, r.Stderr)
	}
}
