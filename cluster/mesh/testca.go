package mesh

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/url"
	"sync/atomic"
	"time"
)

// TestCA is an in-memory certificate authority for in-process pools (the
// harness, benchmarks, tests): it issues member identities as the cluster
// CA would.
type TestCA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	roots  *x509.CertPool
	serial atomic.Int64
}

// NewTestCA makes a CA valid for a day around now.
func NewTestCA(now time.Time) (*TestCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rolter test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &TestCA{cert: cert, key: key, roots: x509.NewCertPool()}
	ca.roots.AddCert(cert)
	ca.serial.Store(1)
	return ca, nil
}

// Issue returns an identity named name for role with an ECDSA P-256
// key, valid for an hour around now.
func (ca *TestCA) Issue(name string, role Role, now time.Time) (*Identity, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	if role != 0 {
		tmpl.URIs = []*url.URL{RoleURL(role)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Identity{Chain: [][]byte{der}, Leaf: leaf, Key: key, Roots: ca.roots}, nil
}
