// Package certstest issues throwaway certificates for tests: a CA, and
// leaf certificates it signs for 127.0.0.1 and localhost with chosen
// validity and usages, written as PEM files.
package certstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

var serial atomic.Int64

// CA is a certificate authority living in a test's temp dir.
type CA struct {
	Cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	CertPEM string // path of the CA certificate
	dir     string
}

// NewCA makes a CA named name, valid for a day around now.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := &CA{Cert: cert, key: key, dir: dir, CertPEM: filepath.Join(dir, name+"-ca.crt")}
	writePEM(t, ca.CertPEM, "CERTIFICATE", der)
	return ca
}

// Pool returns a pool holding the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf is an issued certificate's files.
type Leaf struct {
	Cert, Key string
	Serial    *big.Int
}

// Issue signs a certificate for 127.0.0.1 and localhost valid over
// [notBefore, notAfter], usable by servers and clients, and writes it to
// name.crt and name.key in the CA's dir (overwriting: a renewal).
func (ca *CA) Issue(t testing.TB, name string, notBefore, notAfter time.Time) Leaf {
	t.Helper()
	return ca.IssueFor(t, name, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}, notBefore, notAfter)
}

// IssueFor is Issue for the given DNS names and IPs (none: a certificate
// no address matches).
func (ca *CA) IssueFor(t testing.TB, name string, dns []string, ips []net.IP, notBefore, notAfter time.Time) Leaf {
	t.Helper()
	return ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, NotBefore: notBefore, NotAfter: notAfter,
		DNSNames: dns, IPAddresses: ips})
}

// Member issues a gossip member's certificate valid for an hour around
// now: common name name and the URI SAN uri (a role, "rolter:router" or
// "rolter:sidecar"; empty: none).
func (ca *CA) Member(t testing.TB, name, uri string) Leaf {
	t.Helper()
	now := time.Now()
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: name}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}
	if uri != "" {
		u, err := url.Parse(uri)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	return ca.issue(t, tmpl)
}

// issue signs tmpl (its name, validity and SANs) with a new key, usable by
// servers and clients, and writes it to <common name>.crt and .key.
func (ca *CA) issue(t testing.TB, tmpl *x509.Certificate) Leaf {
	t.Helper()
	key := newKey(t)
	sn := big.NewInt(serial.Add(1))
	name := tmpl.Subject.CommonName
	tmpl.SerialNumber = sn
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l := Leaf{Cert: filepath.Join(ca.dir, name+".crt"), Key: filepath.Join(ca.dir, name+".key"), Serial: sn}
	// Key first, certificate last: a reader never pairs a new certificate
	// with an old key for long.
	writePEM(t, l.Key, "EC PRIVATE KEY", kder)
	writePEM(t, l.Cert, "CERTIFICATE", der)
	return l
}

// Valid issues a certificate valid for an hour around now.
func (ca *CA) Valid(t testing.TB, name string) Leaf {
	now := time.Now()
	return ca.Issue(t, name, now.Add(-time.Hour), now.Add(time.Hour))
}

// Expired issues a certificate that expired an hour ago.
func (ca *CA) Expired(t testing.TB, name string) Leaf {
	now := time.Now()
	return ca.Issue(t, name, now.Add(-2*time.Hour), now.Add(-time.Hour))
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// writePEM writes one PEM block to path through a rename, as a secret
// volume update does.
func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
