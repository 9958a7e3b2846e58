package mesh

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"os"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Errors about a member's identity.
var (
	// ErrIdentity: the certificate, key or CA given for gossip identity
	// cannot be used.
	ErrIdentity = errors.New("mesh: gossip identity")
)

// Identity is a member's certificate from the cluster CA and its private
// key. With it, the member's name is the certificate's common name, every
// message it sends is signed, and every message it receives must be signed
// by the key certified for the name it claims (see doc.go, Trust).
type Identity struct {
	// Chain is the DER certificate chain, leaf first.
	Chain [][]byte
	Leaf  *x509.Certificate
	// Key signs: an ECDSA P-256 or an Ed25519 private key matching Leaf.
	Key crypto.Signer
	// Roots verifies the other members' certificates.
	Roots *x509.CertPool
}

// LoadIdentity reads a PEM certificate (chain) and key and the PEM CA
// bundle that signs every member's certificate.
func LoadIdentity(certFile, keyFile, caFile string) (*Identity, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIdentity, err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w: ca: %w", ErrIdentity, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: ca %s: no certificates", ErrIdentity, caFile)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrIdentity, err)
		}
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: unsupported private key %T", ErrIdentity, pair.PrivateKey)
	}
	id := &Identity{Chain: pair.Certificate, Leaf: leaf, Key: signer, Roots: roots}
	if err := id.check(time.Now()); err != nil {
		return nil, err
	}
	return id, nil
}

// Name returns the member name the certificate gives: its common name.
func (id *Identity) Name() string { return id.Leaf.Subject.CommonName }

// check verifies that the identity is usable: a supported key, a name,
// and a certificate the CA signed that is valid at now.
func (id *Identity) check(now time.Time) error {
	if id.Leaf == nil || id.Key == nil || id.Roots == nil || len(id.Chain) == 0 {
		return fmt.Errorf("%w: certificate, key and CA are all required", ErrIdentity)
	}
	if id.Name() == "" {
		return fmt.Errorf("%w: the certificate has no common name (the member name)", ErrIdentity)
	}
	if _, err := verifierOf(id.Leaf.PublicKey); err != nil {
		return err
	}
	if _, err := verifyChain(id.Chain, id.Roots, now); err != nil {
		return fmt.Errorf("%w: own certificate: %w", ErrIdentity, err)
	}
	return nil
}

// keyIDLen is the bytes of a certificate's SHA-256 a member announces in
// its meta: which certificate its messages are signed under.
const keyIDLen = 16

func keyIDOf(leafDER []byte) []byte {
	sum := sha256.Sum256(leafDER)
	return sum[:keyIDLen]
}

// sigLen is the signature size: Ed25519, or ECDSA P-256 as r‖s.
const sigLen = 64

// sigField is the protobuf field carrying a message's signature. It is the
// last field, so the signed bytes are everything before it.
const sigField protowire.Number = 100

// sigTrailer is the encoded signature field: a 2-byte tag, a length byte
// and the signature.
const sigTrailer = 2 + 1 + sigLen

var sigPrefix = protowire.AppendVarint(protowire.AppendTag(nil, sigField, protowire.BytesType), sigLen)

// signer signs this member's messages.
type signer struct{ key crypto.Signer }

// seal appends the signature field over msg (type byte included).
func (s signer) seal(msg []byte) []byte {
	var sig []byte
	switch k := s.key.(type) {
	case ed25519.PrivateKey:
		sig = ed25519.Sign(k, msg)
	case *ecdsa.PrivateKey:
		sum := sha256.Sum256(msg)
		r, ss, err := ecdsa.Sign(rand.Reader, k, sum[:])
		if err != nil {
			return msg // unreachable with crypto/rand; the receiver drops it
		}
		sig = make([]byte, sigLen)
		r.FillBytes(sig[:32])
		ss.FillBytes(sig[32:])
	default:
		return msg
	}
	out := make([]byte, 0, len(msg)+sigTrailer)
	out = append(out, msg...)
	out = append(out, sigPrefix...)
	return append(out, sig...)
}

// unseal splits a received message into what was signed and the
// signature; ok is false when it carries no signature field at its end.
func unseal(buf []byte) (signed, sig []byte, ok bool) {
	if len(buf) < 1+sigTrailer {
		return nil, nil, false
	}
	cut := len(buf) - sigTrailer
	if !bytes.Equal(buf[cut:cut+len(sigPrefix)], sigPrefix) {
		return nil, nil, false
	}
	return buf[:cut], buf[cut+len(sigPrefix):], true
}

// verifier checks signatures made by one member's key.
type verifier func(msg, sig []byte) bool

func verifierOf(pub any) (verifier, error) {
	switch k := pub.(type) {
	case ed25519.PublicKey:
		return func(msg, sig []byte) bool { return len(sig) == sigLen && ed25519.Verify(k, msg, sig) }, nil
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("%w: ECDSA keys must be P-256", ErrIdentity)
		}
		return func(msg, sig []byte) bool {
			if len(sig) != sigLen {
				return false
			}
			sum := sha256.Sum256(msg)
			r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
			return ecdsa.Verify(k, sum[:], r, s)
		}, nil
	}
	return nil, fmt.Errorf("%w: unsupported public key %T (want ECDSA P-256 or Ed25519)", ErrIdentity, pub)
}

// verifyChain checks a DER chain (leaf first) against roots at now and
// returns the leaf.
func verifyChain(chain [][]byte, roots *x509.CertPool, now time.Time) (*x509.Certificate, error) {
	if len(chain) == 0 {
		return nil, errors.New("empty chain")
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return nil, err
	}
	inter := x509.NewCertPool()
	for _, der := range chain[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		inter.AddCert(c)
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return leaf, err
}

// identityMsg carries a member's certificate chain (msgIdentity). It is
// not signed: the CA's signature on the certificate is what binds the
// name to the key, so any member may relay it.
type identityMsg struct {
	From  string
	Chain [][]byte
	// Reply asks the receiver to send its own certificate back.
	Reply bool
}

// Bounds on a certificate chain a peer may send.
const (
	maxChainCerts = 4
	maxCertBytes  = 8 << 10
)

func encodeIdentity(m *identityMsg) []byte {
	b := appendHeader(nil, msgIdentity, m.From)
	for _, der := range m.Chain {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, der)
	}
	if m.Reply {
		b = appendUint(b, 4, 1)
	}
	return b
}

func decodeIdentity(b []byte) (*identityMsg, error) {
	m := &identityMsg{}
	var err error
	m.From, err = eachField(b, func(fl field) error {
		switch fl.num {
		case 3:
			if len(m.Chain) >= maxChainCerts || len(fl.b) > maxCertBytes {
				return fmt.Errorf("%w: certificate chain too long", errMalformed)
			}
			m.Chain = append(m.Chain, bytes.Clone(fl.b))
		case 4:
			m.Reply = fl.u != 0
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if m.From == "" || len(m.Chain) == 0 {
		return nil, fmt.Errorf("%w: identity without name or certificate", errMalformed)
	}
	return m, nil
}

// peerKey is a member's verified certificate key.
type peerKey struct {
	keyID  []byte
	verify verifier
}
