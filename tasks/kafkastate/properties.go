package kafkastate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/changesink/changesink/internal/outcome"
)

// Properties is KAFKA_PROPERTIES parsed: the librdkafka client properties the
// seed passes to confluent-kafka, mapped to franz-go. Its String and
// GoString hide the password and key password.
type Properties struct {
	// Brokers is bootstrap.servers split at commas, trimmed, with any
	// "PROTOCOL://" prefix removed (librdkafka accepts one).
	Brokers []string
	// ClientID is client.id ("" = franz-go's default, "kgo").
	ClientID string
	// Protocol is security.protocol, upper-cased: PLAINTEXT (default),
	// SSL, SASL_PLAINTEXT or SASL_SSL.
	Protocol string
	// Mechanism is sasl.mechanism or sasl.mechanisms (librdkafka's name),
	// upper-cased: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism string
	// Username and Password are sasl.username and sasl.password.
	Username, Password string
	// CALocation is ssl.ca.location: a PEM file, a directory of PEM files,
	// or "probe" (the system roots, as when it is unset). A relative path is
	// read from the current directory (under Kestra's runners, the task's
	// working directory, where inputFiles puts files).
	CALocation string
	// CAPEM is ssl.ca.pem: the CA certificates themselves (PEM text), an
	// alternative to CALocation that fits in the secret.
	CAPEM string
	// CertLocation and KeyLocation are ssl.certificate.location and
	// ssl.key.location (PEM; a client certificate for mutual TLS).
	CertLocation, KeyLocation string
	// CertPEM and KeyPEM are ssl.certificate.pem and ssl.key.pem: the client
	// certificate and key themselves (PEM text), alternatives to the
	// locations. KeyPEM is a secret.
	CertPEM, KeyPEM string
	// KeyPassword is ssl.key.password, for a legacy encrypted PEM key
	// ("Proc-Type: 4,ENCRYPTED"). Encrypted PKCS#8 keys are refused: Go's
	// standard library cannot decrypt them.
	KeyPassword string
	// VerifyHostname is false only for
	// ssl.endpoint.identification.algorithm=none; the certificate chain is
	// verified either way.
	VerifyHostname bool
	// Overridden lists keys that were present but have no effect, sorted:
	// those the seed overrides (group.id, isolation.level, ...) and consumer
	// group settings (session.timeout.ms: neither the seed nor changesink
	// joins a group). They are accepted so that the seed's secret, or a
	// provider's copied client config, works unchanged.
	Overridden []string
}

// supportedProperties are the KAFKA_PROPERTIES keys changesink maps.
var supportedProperties = []string{
	"bootstrap.servers", "client.id", "security.protocol",
	"sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
	"ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.certificate.pem",
	"ssl.key.location", "ssl.key.pem", "ssl.key.password", "ssl.endpoint.identification.algorithm",
}

// seedOverridden are the keys that have no effect: those the seed sets itself
// with config.update(...), so a value in the secret never took effect there
// either, and session.timeout.ms, a consumer group setting that Confluent
// Cloud's client config snippet includes (the seed assigns partitions and
// joins no group; changesink has no consumer at all).
var seedOverridden = []string{
	"group.id", "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset",
	"isolation.level", "enable.partition.eof", "allow.auto.create.topics", "session.timeout.ms",
}

// sslProperties are the keys that only mean something with TLS.
var sslProperties = []string{
	"ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.certificate.pem",
	"ssl.key.location", "ssl.key.pem", "ssl.key.password", "ssl.endpoint.identification.algorithm",
}

func propErr(format string, args ...any) error {
	return outcome.Config.Mark(fmt.Errorf("KAFKA_PROPERTIES: "+format, args...))
}

// ParseProperties parses KAFKA_PROPERTIES, a JSON object of string values
// with librdkafka property names. It returns a configuration error
// (outcome.Config) for anything it cannot map faithfully: malformed JSON, a
// key given twice, a non-string value, an unknown or unsupported key (the
// error lists the supported ones), a missing bootstrap.servers, an unknown
// security.protocol or SASL mechanism (GSSAPI and OAUTHBEARER are not
// supported), sasl.mechanism and sasl.mechanisms that disagree, SASL
// settings without a SASL protocol (or the reverse), ssl.* settings
// without an SSL protocol, and half a client key pair. Errors name keys,
// never values.
func ParseProperties(raw string) (Properties, error) {
	values, err := decodeStringObject(raw)
	if err != nil {
		return Properties{}, err
	}
	p := Properties{Protocol: "PLAINTEXT", VerifyHostname: true}
	var unknown []string
	for k := range values {
		switch {
		case slices.Contains(supportedProperties, k):
		case slices.Contains(seedOverridden, k):
			p.Overridden = append(p.Overridden, k)
		default:
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return Properties{}, propErr("%s not supported; changesink maps only %s (and accepts, with no effect, the keys the seed overrides and consumer group settings: %s)",
			quoteList(unknown), strings.Join(supportedProperties, ", "), strings.Join(seedOverridden, ", "))
	}
	slices.Sort(p.Overridden)
	for k, v := range values {
		if v.isString {
			continue
		}
		if slices.Contains(seedOverridden, k) {
			continue // the seed overrides it whatever its type
		}
		return Properties{}, propErr("%q must be a JSON string", k)
	}
	get := func(k string) string { return values[k].s }

	for _, b := range strings.Split(get("bootstrap.servers"), ",") {
		b = strings.TrimSpace(b)
		if _, rest, ok := strings.Cut(b, "://"); ok {
			b = rest
		}
		if b != "" {
			p.Brokers = append(p.Brokers, b)
		}
	}
	if len(p.Brokers) == 0 {
		return Properties{}, propErr(`"bootstrap.servers" is required: a comma-separated list of host:port`)
	}
	p.ClientID = get("client.id")

	if v, ok := values["security.protocol"]; ok {
		p.Protocol = strings.ToUpper(strings.TrimSpace(v.s))
		if !slices.Contains([]string{"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}, p.Protocol) {
			return Properties{}, propErr(`"security.protocol" must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL`)
		}
	}
	isSASL := strings.HasPrefix(p.Protocol, "SASL_")
	isSSL := p.Protocol == "SSL" || p.Protocol == "SASL_SSL"

	m1, has1 := values["sasl.mechanism"]
	m2, has2 := values["sasl.mechanisms"]
	mech1, mech2 := strings.ToUpper(strings.TrimSpace(m1.s)), strings.ToUpper(strings.TrimSpace(m2.s))
	switch {
	case has1 && has2 && mech1 != mech2:
		return Properties{}, propErr(`"sasl.mechanism" and "sasl.mechanisms" conflict: both are set`)
	case has1:
		p.Mechanism = mech1
	case has2:
		p.Mechanism = mech2
	}
	p.Username, p.Password = get("sasl.username"), get("sasl.password")
	_, hasUser := values["sasl.username"]
	_, hasPass := values["sasl.password"]
	if isSASL {
		name := "sasl.mechanism"
		if !has1 && has2 {
			name = "sasl.mechanisms"
		}
		switch {
		case p.Mechanism == "":
			return Properties{}, propErr(`"sasl.mechanism" is required with security.protocol %s: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (not GSSAPI, librdkafka's default)`, p.Protocol)
		case !slices.Contains([]string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}, p.Mechanism):
			return Properties{}, propErr("%q must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", name)
		case p.Username == "":
			return Properties{}, propErr(`"sasl.username" is required with security.protocol %s`, p.Protocol)
		case p.Password == "":
			return Properties{}, propErr(`"sasl.password" is required with security.protocol %s`, p.Protocol)
		}
	} else if has1 || has2 || hasUser || hasPass {
		return Properties{}, propErr("sasl settings are set but security.protocol is %s, not SASL_PLAINTEXT or SASL_SSL, so they would be ignored", p.Protocol)
	}

	p.CALocation, p.CAPEM = get("ssl.ca.location"), get("ssl.ca.pem")
	p.CertLocation, p.CertPEM = get("ssl.certificate.location"), get("ssl.certificate.pem")
	p.KeyLocation, p.KeyPEM = get("ssl.key.location"), get("ssl.key.pem")
	p.KeyPassword = get("ssl.key.password")
	for _, pair := range [][2]string{
		{"ssl.ca.location", "ssl.ca.pem"}, {"ssl.certificate.location", "ssl.certificate.pem"}, {"ssl.key.location", "ssl.key.pem"},
	} {
		if get(pair[0]) != "" && get(pair[1]) != "" {
			return Properties{}, propErr("%q and %q are both set", pair[0], pair[1])
		}
	}
	if v, ok := values["ssl.endpoint.identification.algorithm"]; ok {
		switch strings.ToLower(strings.TrimSpace(v.s)) {
		case "https":
		case "none":
			p.VerifyHostname = false
		default:
			return Properties{}, propErr(`"ssl.endpoint.identification.algorithm" must be https or none`)
		}
	}
	if !isSSL {
		for _, k := range sslProperties {
			if _, ok := values[k]; ok {
				return Properties{}, propErr("%q is set but security.protocol is %s, not SSL or SASL_SSL, so TLS would not be used", k, p.Protocol)
			}
		}
	}
	if (p.CertLocation == "" && p.CertPEM == "") != (p.KeyLocation == "" && p.KeyPEM == "") {
		return Properties{}, propErr(`a client certificate needs both "ssl.certificate.location" (or "ssl.certificate.pem") and "ssl.key.location" (or "ssl.key.pem")`)
	}
	return p, nil
}

type propValue struct {
	s        string
	isString bool
}

// decodeStringObject decodes a JSON object, refusing duplicate keys and
// trailing data. Errors never quote the input.
func decodeStringObject(raw string) (map[string]propValue, error) {
	notObject := propErr("must be a JSON object of librdkafka properties, e.g. {\"bootstrap.servers\":\"kafka:9092\"}")
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, notObject
	}
	out := map[string]propValue{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, notObject
		}
		k, ok := tok.(string)
		if !ok {
			return nil, notObject
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, notObject
		}
		if _, dup := out[k]; dup {
			return nil, propErr("%q is given more than once", k)
		}
		s, isString := v.(string)
		out[k] = propValue{s: s, isString: isString}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, notObject
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, notObject
	}
	return out, nil
}

func quoteList(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = fmt.Sprintf("%q", k)
	}
	return strings.Join(q, ", ")
}

// PropertySecrets returns the values in KAFKA_PROPERTIES that must never be
// printed: every string value whose key names a password, secret, token or
// credential (sasl.password, ssl.key.password, ...), and the client key
// itself (ssl.key.pem). It parses leniently and
// returns nil when raw is not a JSON object, so cmd can register the
// secrets with its masker before anything else runs.
func PropertySecrets(raw string) []string {
	var m map[string]any
	if json.Unmarshal([]byte(raw), &m) != nil {
		return nil
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		s, ok := m[k].(string)
		if !ok || s == "" {
			continue
		}
		lk := strings.ToLower(k)
		if lk == "ssl.key.pem" {
			out = append(out, s)
			continue
		}
		for _, w := range []string{"password", "secret", "token", "credential"} {
			if strings.Contains(lk, w) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// String describes p without its secrets.
func (p Properties) String() string {
	hide := func(s string) string {
		if s == "" {
			return ""
		}
		return "xxxxx"
	}
	size := func(s string) string {
		if s == "" {
			return `""`
		}
		return fmt.Sprintf("(%d bytes)", len(s))
	}
	return fmt.Sprintf("Properties{Brokers:%q ClientID:%q Protocol:%s Mechanism:%s Username:%q Password:%s CALocation:%q CAPEM:%s CertLocation:%q CertPEM:%s KeyLocation:%q KeyPEM:%s KeyPassword:%s VerifyHostname:%t Overridden:%q}",
		p.Brokers, p.ClientID, p.Protocol, p.Mechanism, p.Username, hide(p.Password), p.CALocation, size(p.CAPEM), p.CertLocation, size(p.CertPEM),
		p.KeyLocation, hide(p.KeyPEM), hide(p.KeyPassword), p.VerifyHostname, p.Overridden)
}

// GoString is String, so %#v does not print the secrets either.
func (p Properties) GoString() string { return p.String() }

// clientOpts returns the franz-go options for p: seed brokers, client id,
// TLS and SASL, plus changesink's fixed timeouts. It reads the TLS files.
func (p Properties) clientOpts() ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(p.Brokers...),
		// Bounded retries: a dead broker must fail the run within
		// POLL_SECONDS plus a bounded timeout, not be retried forever.
		kgo.RetryTimeout(15 * time.Second),
		kgo.RequestTimeoutOverhead(10 * time.Second),
	}
	if p.ClientID != "" {
		opts = append(opts, kgo.ClientID(p.ClientID))
	}
	if p.Protocol == "SSL" || p.Protocol == "SASL_SSL" {
		cfg, err := p.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.Dialer(tlsDialer(cfg)))
	} else {
		opts = append(opts, kgo.DialTimeout(dialTimeout))
	}
	switch p.Mechanism {
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: p.Username, Pass: p.Password}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: p.Username, Pass: p.Password}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: p.Username, Pass: p.Password}.AsSha512Mechanism()))
	}
	return opts, nil
}

// dialTimeout bounds a TCP dial and, with TLS, its handshake.
const dialTimeout = 10 * time.Second

// tlsHandshakeEOF is a broker that closed the connection during the TLS
// handshake: almost always a port whose listener does not speak TLS.
type tlsHandshakeEOF struct {
	addr string
	err  error
}

func (e *tlsHandshakeEOF) Error() string {
	return fmt.Sprintf("%s closed the connection during the TLS handshake: %v", e.addr, e.err)
}
func (e *tlsHandshakeEOF) Unwrap() error { return e.err }

// tlsDialer dials like kgo.DialTLSConfig (the server name from the broker's
// host unless cfg sets one), and marks a handshake the broker ended with
// EOF as tlsHandshakeEOF, which franz-go's own error for it
// (kgo.ErrFirstReadEOF) does not tell apart from a broker that dropped a
// connection at its first request.
func tlsDialer(cfg *tls.Config) func(ctx context.Context, network, host string) (net.Conn, error) {
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		c := cfg.Clone()
		if c.ServerName == "" {
			server, _, err := net.SplitHostPort(host)
			if err != nil {
				return nil, fmt.Errorf("split host:port %q for dialing: %w", host, err)
			}
			c.ServerName = server
		}
		conn, err := (&tls.Dialer{NetDialer: &net.Dialer{Timeout: dialTimeout}, Config: c}).DialContext(ctx, network, host)
		if err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
			return nil, &tlsHandshakeEOF{addr: host, err: err}
		}
		return conn, err
	}
}

// tlsConfig builds the client TLS configuration from the ssl.* properties.
// Errors are configuration errors naming the property and the file, never
// the file's content or the key password.
func (p Properties) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case p.CAPEM != "":
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(p.CAPEM)) {
			return nil, propErr(`"ssl.ca.pem" holds no PEM certificate (-----BEGIN CERTIFICATE----- ..., with its line breaks written as \n in the JSON string)`)
		}
		cfg.RootCAs = pool
	case p.CALocation != "" && p.CALocation != "probe":
		pool, err := loadCAs(p.CALocation)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if p.CertLocation != "" || p.CertPEM != "" {
		cert, err := p.loadKeyPair()
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if !p.VerifyHostname {
		// Verify the chain against the roots, but not the host name
		// (librdkafka's ssl.endpoint.identification.algorithm=none).
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("kafka broker presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			if err != nil {
				return fmt.Errorf("kafka broker certificate: %w", err)
			}
			return nil
		}
	}
	return cfg, nil
}

func loadCAs(loc string) (*x509.CertPool, error) {
	files := []string{loc}
	if st, err := os.Stat(loc); err == nil && st.IsDir() {
		entries, err := os.ReadDir(loc)
		if err != nil {
			return nil, propErr("ssl.ca.location: read directory %s: %w", loc, err)
		}
		files = files[:0]
		for _, e := range entries {
			if !e.IsDir() {
				files = append(files, filepath.Join(loc, e.Name()))
			}
		}
	}
	pool := x509.NewCertPool()
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, propErr("ssl.ca.location: %w", err)
		}
		if pool.AppendCertsFromPEM(b) {
			n++
		}
	}
	if n == 0 {
		return nil, propErr("ssl.ca.location: no PEM certificate found in %s", loc)
	}
	return pool, nil
}

// loadKeyPair reads the client certificate and key, from their files or
// from the properties themselves.
func (p Properties) loadKeyPair() (tls.Certificate, error) {
	certName, keyName := "ssl.certificate.pem", "ssl.key.pem"
	certPEM, keyPEM := []byte(p.CertPEM), []byte(p.KeyPEM)
	var err error
	if p.CertLocation != "" {
		certName = "ssl.certificate.location " + p.CertLocation
		if certPEM, err = os.ReadFile(p.CertLocation); err != nil {
			return tls.Certificate{}, propErr("ssl.certificate.location: %w", err)
		}
	}
	if p.KeyLocation != "" {
		keyName = "ssl.key.location " + p.KeyLocation
		if keyPEM, err = os.ReadFile(p.KeyLocation); err != nil {
			return tls.Certificate{}, propErr("ssl.key.location: %w", err)
		}
	}
	defer clear(keyPEM)
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return tls.Certificate{}, propErr("%s: no PEM block", keyName)
	}
	decrypted := false
	switch {
	case block.Type == "ENCRYPTED PRIVATE KEY":
		return tls.Certificate{}, propErr("%s: %w", keyName, ErrEncryptedPKCS8)
	//lint:ignore SA1019 legacy encrypted PEM is what librdkafka's ssl.key.password decrypts; the weakness is the format's.
	case x509.IsEncryptedPEMBlock(block):
		if p.KeyPassword == "" {
			return tls.Certificate{}, propErr("%s: the key is encrypted, and ssl.key.password is not set", keyName)
		}
		//lint:ignore SA1019 as above: the operator chose the legacy format, and the seed's librdkafka reads it too.
		der, err := x509.DecryptPEMBlock(block, []byte(p.KeyPassword))
		if err != nil {
			return tls.Certificate{}, propErr("%s: cannot decrypt the key with ssl.key.password (wrong password?)", keyName)
		}
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: block.Type, Bytes: der})
		defer clear(keyPEM)
		decrypted = true
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if decrypted {
			// Legacy PEM encryption has no integrity check: a wrong password
			// passes DecryptPEMBlock's padding check about once in 256 and
			// yields bytes that are not a key.
			return tls.Certificate{}, propErr("%s: cannot decrypt the key with ssl.key.password (wrong password?), or %s and %s are not "+
				"a matching PEM certificate and key: %w", keyName, certName, keyName, err)
		}
		return tls.Certificate{}, propErr("%s and %s are not a matching PEM certificate and key: %w", certName, keyName, err)
	}
	return cert, nil
}
