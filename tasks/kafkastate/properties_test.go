package kafkastate

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

const testSecret = "s3cr3t-Pw!"

func TestParseProperties(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want Properties
	}{
		{"minimal", `{"bootstrap.servers":"127.0.0.1:9092"}`,
			Properties{Brokers: []string{"127.0.0.1:9092"}, Protocol: "PLAINTEXT", VerifyHostname: true}},
		{"several servers, spaces, scheme prefixes", `{"bootstrap.servers":" a:1, PLAINTEXT://b:2 ,c"}`,
			Properties{Brokers: []string{"a:1", "b:2", "c"}, Protocol: "PLAINTEXT", VerifyHostname: true}},
		{"client id", `{"bootstrap.servers":"a:1","client.id":"kestra"}`,
			Properties{Brokers: []string{"a:1"}, ClientID: "kestra", Protocol: "PLAINTEXT", VerifyHostname: true}},
		{"sasl scram, lower-case names", `{"bootstrap.servers":"a:1","security.protocol":"sasl_plaintext","sasl.mechanisms":"scram-sha-512","sasl.username":"u","sasl.password":"` + testSecret + `"}`,
			Properties{Brokers: []string{"a:1"}, Protocol: "SASL_PLAINTEXT", Mechanism: "SCRAM-SHA-512", Username: "u", Password: testSecret, VerifyHostname: true}},
		{"sasl.mechanism and sasl.mechanisms agree", `{"bootstrap.servers":"a:1","security.protocol":"SASL_SSL","sasl.mechanism":"PLAIN","sasl.mechanisms":"PLAIN","sasl.username":"u","sasl.password":"p"}`,
			Properties{Brokers: []string{"a:1"}, Protocol: "SASL_SSL", Mechanism: "PLAIN", Username: "u", Password: "p", VerifyHostname: true}},
		{"ssl with files and no hostname check", `{"bootstrap.servers":"a:1","security.protocol":"SSL","ssl.ca.location":"/ca.pem","ssl.certificate.location":"/c.pem","ssl.key.location":"/k.pem","ssl.key.password":"kp","ssl.endpoint.identification.algorithm":"none"}`,
			Properties{Brokers: []string{"a:1"}, Protocol: "SSL", CALocation: "/ca.pem", CertLocation: "/c.pem", KeyLocation: "/k.pem", KeyPassword: "kp"}},
		{"endpoint identification https", `{"bootstrap.servers":"a:1","security.protocol":"SSL","ssl.endpoint.identification.algorithm":"HTTPS"}`,
			Properties{Brokers: []string{"a:1"}, Protocol: "SSL", VerifyHostname: true}},
		{"keys the seed overrides are accepted and reported", `{"bootstrap.servers":"a:1","group.id":"g","isolation.level":"read_uncommitted","enable.auto.commit":false}`,
			Properties{Brokers: []string{"a:1"}, Protocol: "PLAINTEXT", VerifyHostname: true, Overridden: []string{"enable.auto.commit", "group.id", "isolation.level"}}},
		// Confluent Cloud's librdkafka snippet, as copied from its console.
		{"confluent cloud client config", `{"bootstrap.servers":"pkc-00000.eu-west-1.aws.confluent.cloud:9092","security.protocol":"SASL_SSL","sasl.mechanisms":"PLAIN","sasl.username":"KEY","sasl.password":"` + testSecret + `","session.timeout.ms":"45000","client.id":"ccloud-python-client-1"}`,
			Properties{Brokers: []string{"pkc-00000.eu-west-1.aws.confluent.cloud:9092"}, ClientID: "ccloud-python-client-1", Protocol: "SASL_SSL", Mechanism: "PLAIN",
				Username: "KEY", Password: testSecret, VerifyHostname: true, Overridden: []string{"session.timeout.ms"}}},
		{"pem strings instead of files", `{"bootstrap.servers":"a:1","security.protocol":"SSL","ssl.ca.pem":"CA","ssl.certificate.pem":"CERT","ssl.key.pem":"KEY"}`,
			Properties{Brokers: []string{"a:1"}, Protocol: "SSL", CAPEM: "CA", CertPEM: "CERT", KeyPEM: "KEY", VerifyHostname: true}},
		{"certificate file, key pem", `{"bootstrap.servers":"a:1","security.protocol":"SSL","ssl.certificate.location":"/c.pem","ssl.key.pem":"KEY"}`,
			Properties{Brokers: []string{"a:1"}, Protocol: "SSL", CertLocation: "/c.pem", KeyPEM: "KEY", VerifyHostname: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProperties(tt.raw)
			if err != nil {
				t.Fatalf("ParseProperties: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

// TestParsePropertiesRefusals: every unknown, unsupported or inconsistent
// property is a configuration error that says what is wrong (and, for an
// unknown key, lists the supported ones) and never shows a value.
func TestParsePropertiesRefusals(t *testing.T) {
	sasl := `"security.protocol":"SASL_PLAINTEXT","sasl.username":"u","sasl.password":"` + testSecret + `"`
	tests := []struct {
		name string
		raw  string
		want []string
	}{
		{"empty", ``, []string{"KAFKA_PROPERTIES", "JSON object"}},
		{"not json", `bootstrap.servers=` + testSecret, []string{"KAFKA_PROPERTIES", "JSON object"}},
		{"array", `["` + testSecret + `"]`, []string{"JSON object"}},
		{"trailing data", `{"bootstrap.servers":"a:1"} {}`, []string{"JSON object"}},
		{"duplicate key", `{"bootstrap.servers":"a:1","bootstrap.servers":"b:1"}`, []string{"bootstrap.servers", "more than once"}},
		{"unknown key", `{"bootstrap.servers":"a:1","fetch.wait.max.ms":"` + testSecret + `"}`,
			[]string{`"fetch.wait.max.ms"`, "not supported", "bootstrap.servers", "ssl.endpoint.identification.algorithm"}},
		{"keystore is unsupported", `{"bootstrap.servers":"a:1","ssl.keystore.location":"/x.p12"}`, []string{"ssl.keystore.location", "not supported"}},
		{"non-string value", `{"bootstrap.servers":"a:1","sasl.password":12345}`, []string{"sasl.password", "string"}},
		{"missing bootstrap.servers", `{"client.id":"x"}`, []string{"bootstrap.servers", "required"}},
		{"blank bootstrap.servers", `{"bootstrap.servers":" , "}`, []string{"bootstrap.servers"}},
		{"bad protocol", `{"bootstrap.servers":"a:1","security.protocol":"TLS"}`, []string{"security.protocol", "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"}},
		{"GSSAPI", `{"bootstrap.servers":"a:1",` + sasl + `,"sasl.mechanism":"GSSAPI"}`, []string{"sasl.mechanism", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"}},
		{"OAUTHBEARER", `{"bootstrap.servers":"a:1",` + sasl + `,"sasl.mechanisms":"OAUTHBEARER"}`, []string{"sasl.mechanisms", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"}},
		{"conflicting mechanisms", `{"bootstrap.servers":"a:1",` + sasl + `,"sasl.mechanism":"PLAIN","sasl.mechanisms":"SCRAM-SHA-256"}`, []string{"sasl.mechanism", "sasl.mechanisms", "conflict"}},
		{"sasl protocol without mechanism", `{"bootstrap.servers":"a:1",` + sasl + `}`, []string{"sasl.mechanism", "required"}},
		{"sasl without username", `{"bootstrap.servers":"a:1","security.protocol":"SASL_SSL","sasl.mechanism":"PLAIN","sasl.password":"` + testSecret + `"}`, []string{"sasl.username"}},
		{"sasl without password", `{"bootstrap.servers":"a:1","security.protocol":"SASL_SSL","sasl.mechanism":"PLAIN","sasl.username":"u"}`, []string{"sasl.password"}},
		{"sasl settings on PLAINTEXT", `{"bootstrap.servers":"a:1","sasl.mechanism":"PLAIN","sasl.username":"u","sasl.password":"` + testSecret + `"}`, []string{"security.protocol", "PLAINTEXT", "sasl"}},
		{"ssl settings on SASL_PLAINTEXT", `{"bootstrap.servers":"a:1",` + sasl + `,"sasl.mechanism":"PLAIN","ssl.ca.location":"/ca.pem"}`, []string{"ssl.ca.location", "SASL_PLAINTEXT"}},
		{"certificate without key", `{"bootstrap.servers":"a:1","security.protocol":"SSL","ssl.certificate.location":"/c.pem"}`, []string{"ssl.key.location"}},
		{"key without certificate", `{"bootstrap.servers":"a:1","security.protocol":"SSL","ssl.key.location":"/k.pem"}`, []string{"ssl.certificate.location"}},
		{"ca file and pem", `{"bootstrap.servers":"a:1","security.protocol":"SSL","ssl.ca.location":"/ca.pem","ssl.ca.pem":"` + testSecret + `"}`, []string{"ssl.ca.location", "ssl.ca.pem", "both set"}},
		{"key file and pem", `{"bootstrap.servers":"a:1","security.protocol":"SSL","ssl.certificate.location":"/c.pem","ssl.key.location":"/k.pem","ssl.key.pem":"` + testSecret + `"}`, []string{"ssl.key.location", "ssl.key.pem"}},
		{"key pem without certificate", `{"bootstrap.servers":"a:1","security.protocol":"SSL","ssl.key.pem":"` + testSecret + `"}`, []string{"ssl.certificate.location", "ssl.certificate.pem"}},
		{"ca pem on PLAINTEXT", `{"bootstrap.servers":"a:1","ssl.ca.pem":"x"}`, []string{"ssl.ca.pem", "PLAINTEXT"}},
		{"bad endpoint algorithm", `{"bootstrap.servers":"a:1","security.protocol":"SSL","ssl.endpoint.identification.algorithm":"` + testSecret + `"}`, []string{"ssl.endpoint.identification.algorithm", "https", "none"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseProperties(tt.raw)
			if err == nil {
				t.Fatal("ParseProperties = nil error")
			}
			testenv.CheckHinted(t, err, Hint, outcome.Config, nil, tt.want...)
			if strings.Contains(err.Error(), testSecret) {
				t.Errorf("error %q shows a value", err)
			}
		})
	}
}

func TestPropertySecrets(t *testing.T) {
	raw := `{"bootstrap.servers":"a:1","sasl.password":"p1-secret","ssl.key.password":"p2-secret","sasl.oauthbearer.client.secret":"p3-secret","ssl.key.pem":"p4-key","ssl.ca.pem":"public","x":5}`
	got := PropertySecrets(raw)
	want := []string{"p3-secret", "p1-secret", "p2-secret", "p4-key"} // in key order
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PropertySecrets = %q, want %q", got, want)
	}
	if s := PropertySecrets(`not json`); len(s) != 0 {
		t.Errorf("PropertySecrets(not json) = %q", s)
	}
	p, err := ParseProperties(`{"bootstrap.servers":"a:1","security.protocol":"SASL_PLAINTEXT","sasl.mechanism":"PLAIN","sasl.username":"u","sasl.password":"` + testSecret + `"}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{p.String(), "" + strings.TrimSpace(p.GoString())} {
		if strings.Contains(s, testSecret) {
			t.Errorf("Properties printed its password: %s", s)
		}
	}
	withKey := Properties{KeyPEM: testSecret, KeyPassword: testSecret, CAPEM: "ca"}
	if s := withKey.String(); strings.Contains(s, testSecret) {
		t.Errorf("Properties printed its key: %s", s)
	}
}

// TestTLSConfig makes real TLS handshakes against a local TLS listener with
// the tls.Config built from the properties: the CA file is used, a client
// certificate is presented, a legacy encrypted key is decrypted with
// ssl.key.password, hostname verification follows
// ssl.endpoint.identification.algorithm, and unreadable or encrypted PKCS#8
// keys are clear configuration errors.
func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	ca := testenv.NewCA(t)
	serverCert := ca.Issue(t, "broker.example.invalid", false)
	clientCert := ca.Issue(t, "client", true)
	caPath := writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.Cert.Raw)
	certPath := writePEM(t, dir, "client.pem", "CERTIFICATE", clientCert.Certificate[0])
	keyDER, err := x509.MarshalPKCS8PrivateKey(clientCert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	keyPath := writePEM(t, dir, "client.key", "PRIVATE KEY", keyDER)
	ecDER, err := x509.MarshalECPrivateKey(clientCert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1019 the test builds the legacy encrypted PEM that librdkafka users have.
	encBlock, err := x509.EncryptPEMBlock(rand.Reader, "EC PRIVATE KEY", ecDER, []byte(testSecret), x509.PEMCipherAES256) //nolint:staticcheck
	if err != nil {
		t.Fatal(err)
	}
	// A wrong password that legacy PEM decryption does not catch: it has no
	// integrity check, only CBC padding, which a wrong key passes about once
	// in 256 (so "wrong", below, fails one way or the other by chance).
	var unnoticed string
	for i := 0; unnoticed == "" && i < 100_000; i++ {
		//lint:ignore SA1019 as above.
		if _, err := x509.DecryptPEMBlock(encBlock, fmt.Appendf(nil, "wrong-%d", i)); err == nil { //nolint:staticcheck
			unnoticed = fmt.Sprintf("wrong-%d", i)
		}
	}
	if unnoticed == "" {
		t.Fatal("no wrong password passed the padding check in 100000 tries")
	}
	encKeyPath := filepath.Join(dir, "client-enc.key")
	testenv.WriteFile(t, encKeyPath, pem.EncodeToMemory(encBlock), 0o600)
	pkcs8EncPath := filepath.Join(dir, "client-pkcs8-enc.key")
	testenv.WriteFile(t, pkcs8EncPath, pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{1, 2, 3}}), 0o600)

	caPEM := testenv.ReadFile(t, caPath)
	certPEM := testenv.ReadFile(t, certPath)
	keyPEM := testenv.ReadFile(t, keyPath)

	addr := testenv.ServeTLSHandshakes(t, &tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert, // a client certificate signed by the CA
		ClientCAs:    ca.Pool(),
	})

	tests := []struct {
		name    string
		props   Properties
		wantErr string // "" = handshake succeeds; "config:" prefix = tlsConfig fails
	}{
		{"ca, client cert, hostname not checked", Properties{Protocol: "SSL", CALocation: caPath, CertLocation: certPath, KeyLocation: keyPath}, ""},
		{"ca, client certificate and key as pem strings", Properties{Protocol: "SSL", CAPEM: string(caPEM), CertPEM: string(certPEM), KeyPEM: string(keyPEM)}, ""},
		{"certificate file and key pem string", Properties{Protocol: "SSL", CAPEM: string(caPEM), CertLocation: certPath, KeyPEM: string(keyPEM)}, ""},
		{"ca pem without a certificate", Properties{Protocol: "SSL", CAPEM: "not pem " + testSecret}, "config:ssl.ca.pem"},
		{"key pem that is not a key", Properties{Protocol: "SSL", CAPEM: string(caPEM), CertPEM: string(certPEM), KeyPEM: "not pem " + testSecret}, "config:ssl.key.pem"},
		{"legacy encrypted key with password", Properties{Protocol: "SSL", CALocation: caPath, CertLocation: certPath, KeyLocation: encKeyPath, KeyPassword: testSecret}, ""},
		{"hostname checked: 127.0.0.1 is not broker.example.invalid", Properties{Protocol: "SSL", CALocation: caPath, CertLocation: certPath, KeyLocation: keyPath, VerifyHostname: true}, "certificate"},
		{"no client certificate: server refuses", Properties{Protocol: "SSL", CALocation: caPath}, "certificate"},
		{"system roots do not trust the test CA", Properties{Protocol: "SSL", CertLocation: certPath, KeyLocation: keyPath}, "certificate"},
		{"encrypted key without password", Properties{Protocol: "SSL", CALocation: caPath, CertLocation: certPath, KeyLocation: encKeyPath}, "config:ssl.key.password"},
		{"encrypted key with wrong password", Properties{Protocol: "SSL", CALocation: caPath, CertLocation: certPath, KeyLocation: encKeyPath, KeyPassword: "wrong"}, "config:ssl.key.password"},
		{"encrypted key with a wrong password the padding does not catch", Properties{Protocol: "SSL", CALocation: caPath, CertLocation: certPath, KeyLocation: encKeyPath, KeyPassword: unnoticed}, "config:cannot decrypt the key with ssl.key.password (wrong password?)"},
		{"encrypted PKCS#8 key", Properties{Protocol: "SSL", CALocation: caPath, CertLocation: certPath, KeyLocation: pkcs8EncPath, KeyPassword: testSecret}, "config:encrypted PKCS#8"},
		{"missing CA file", Properties{Protocol: "SSL", CALocation: filepath.Join(dir, "nope.pem")}, "config:ssl.ca.location"},
		{"CA file without certificates", Properties{Protocol: "SSL", CALocation: keyPath}, "config:ssl.ca.location"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := tt.props.tlsConfig()
			if strings.HasPrefix(tt.wantErr, "config:") {
				want := strings.TrimPrefix(tt.wantErr, "config:")
				testenv.WantHinted(t, err, Hint, outcome.Config, nil, want)
				if strings.Contains(err.Error(), testSecret) {
					t.Fatalf("error %q leaks the password", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("tlsConfig: %v", err)
			}
			cfg = cfg.Clone()
			if cfg.ServerName == "" {
				cfg.ServerName = "127.0.0.1" // kgo fills it from the broker host
			}
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
			if err == nil {
				// TLS 1.3 reports a refused client certificate on the first read.
				conn.SetDeadline(time.Now().Add(5 * time.Second))
				_, err = conn.Read(make([]byte, 1))
				conn.Close()
			}
			if tt.wantErr == "" {
				if err != nil && !strings.Contains(err.Error(), "EOF") {
					t.Fatalf("handshake: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("handshake error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	testenv.WriteFile(t, p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
	return p
}

// FuzzParseProperties: the parser never panics, and no error it returns
// contains the value of sasl.password or ssl.key.password.
func FuzzParseProperties(f *testing.F) {
	f.Add(`{"bootstrap.servers":"a:1"}`, "pw-123")
	f.Add(`{"bootstrap.servers":"a:1","security.protocol":"SASL_SSL","sasl.mechanism":"PLAIN","sasl.username":"u"}`, "pw-123")
	f.Add(`{"ssl.key.password":`, "abc")
	f.Fuzz(func(t *testing.T, raw, s string) {
		if strings.ContainsAny(s, `"\`) || !strings.HasPrefix(strings.TrimSpace(raw), "{") {
			return
		}
		secret := "Zq9" + s // never part of changesink's own message text
		// Put the secret in as sasl.password and as ssl.key.password.
		withSecret := strings.Replace(raw, "{", `{"sasl.password":"`+secret+`","ssl.key.password":"`+secret+`",`, 1)
		_, err := ParseProperties(withSecret)
		if err != nil && strings.Contains(err.Error(), secret) && !strings.Contains(withSecret[len(`{"sasl.password":"`+secret+`","ssl.key.password":"`+secret+`",`):], secret) {
			t.Fatalf("error %q shows the secret", err)
		}
	})
}
