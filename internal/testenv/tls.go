package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"
)

// CA is a certificate authority made for one test (ECDSA P-256, valid for
// an hour either side of now): no client trusts it unless the test gives it
// its Pool.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "changesink test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, key: key}
}

// Pool is a certificate pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue signs a certificate for name (a DNS name, or an IP address as its
// IP SAN), for a client or a server.
func (ca *CA) Issue(t testing.TB, name string, client bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// ServeTLSHandshakes listens on 127.0.0.1:0 with cfg and completes each
// connection's TLS handshake (within 5 s), then closes it: a server that
// speaks TLS and nothing after. It returns the listener's address.
func ServeTLSHandshakes(t testing.TB, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	Serve(t, ln, func(c net.Conn) {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_ = c.(*tls.Conn).Handshake()
	})
	return ln.Addr().String()
}

// ServeUntrustedTLS completes TLS handshakes only (ServeTLSHandshakes),
// with a certificate of a CA of its own, which no client trusts (a client
// refuses it before sending anything else); it returns its address.
func ServeUntrustedTLS(t testing.TB) string {
	t.Helper()
	cert := NewCA(t).Issue(t, "127.0.0.1", false)
	return ServeTLSHandshakes(t, &tls.Config{Certificates: []tls.Certificate{cert}})
}

// ServeTLSAlerts listens on 127.0.0.1:0 and answers whatever a client
// sends with a fatal TLS alert (protocol_version), as a TLS listener may
// answer bytes that are not a TLS client hello; it returns its address.
func ServeTLSAlerts(t testing.TB) string {
	t.Helper()
	return ServeLocal(t, func(c net.Conn) {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			return
		}
		// An alert record: type 21, TLS 1.2, length 2, fatal (2), protocol_version (70).
		_, _ = c.Write([]byte{21, 3, 3, 0, 2, 2, 70})
	})
}
