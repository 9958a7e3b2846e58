package mesh

import (
	"bytes"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
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
// key. With it, the member's name is the certificate's common name and
// every message it sends to a member carries a MAC under the key the two
// share (see doc.go, Trust): only the certificate's holder and the
// receiver can compute it.
type Identity struct {
	// Chain is the DER certificate chain, leaf first.
	Chain [][]byte
	Leaf  *x509.Certificate
	// Key is the certificate's ECDSA P-256 private key.
	Key *ecdsa.PrivateKey
	// Roots verifies the other members' certificates.
	Roots *x509.CertPool
}

// LoadIdentity reads a PEM certificate (chain) and its ECDSA P-256 key
// and the PEM CA bundle that signs every member's certificate.
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
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: the key is %T; gossip identity needs an ECDSA P-256 key", ErrIdentity, pair.PrivateKey)
	}
	id := &Identity{Chain: pair.Certificate, Leaf: leaf, Key: key, Roots: roots}
	if err := id.check(time.Now()); err != nil {
		return nil, err
	}
	return id, nil
}

// Name returns the member name the certificate gives: its common name.
func (id *Identity) Name() string { return id.Leaf.Subject.CommonName }

// check verifies that the identity is usable: a P-256 key, a name, and a
// certificate the CA signed that is valid at now.
func (id *Identity) check(now time.Time) error {
	if id.Leaf == nil || id.Key == nil || id.Roots == nil || len(id.Chain) == 0 {
		return fmt.Errorf("%w: certificate, key and CA are all required", ErrIdentity)
	}
	if id.Name() == "" {
		return fmt.Errorf("%w: the certificate has no common name (the member name)", ErrIdentity)
	}
	if _, err := exchangeKey(id.Leaf.PublicKey); err != nil {
		return err
	}
	if _, err := id.Key.ECDH(); err != nil {
		return fmt.Errorf("%w: %w", ErrIdentity, err)
	}
	if _, err := verifyChain(id.Chain, id.Roots, now); err != nil {
		return fmt.Errorf("%w: own certificate: %w", ErrIdentity, err)
	}
	return nil
}

// keyIDLen is the bytes of a certificate's SHA-256 a member announces in
// its meta: which certificate its messages are authenticated under.
const keyIDLen = 16

func keyIDOf(leafDER []byte) []byte {
	sum := sha256.Sum256(leafDER)
	return sum[:keyIDLen]
}

// macLen is the bytes of HMAC-SHA256 a message carries.
const macLen = 16

// macField is the protobuf field carrying a message's MAC. It is the last
// field, so the authenticated bytes are everything before it.
const macField protowire.Number = 100

// macTrailer is the encoded MAC field: a 2-byte tag, a length byte and
// the MAC.
const macTrailer = 2 + 1 + macLen

var macPrefix = protowire.AppendVarint(protowire.AppendTag(nil, macField, protowire.BytesType), macLen)

// pairInfo separates rolter's pair keys from any other use of the ECDH
// secret.
const pairInfo = "rolter gossip pair key v1"

// exchangeKey is a certificate's public key as an ECDH key.
func exchangeKey(pub any) (*ecdh.PublicKey, error) {
	k, ok := pub.(*ecdsa.PublicKey)
	if !ok || k.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%w: the certificate's key is %T; gossip identity needs ECDSA P-256", ErrIdentity, pub)
	}
	return k.ECDH()
}

// pairKey derives the key two members share: HKDF-SHA256 over their ECDH
// secret, bound to both certificates (their key ids, in byte order).
func pairKey(own *ecdsa.PrivateKey, ownID []byte, peer *ecdh.PublicKey, peerID []byte) ([]byte, error) {
	priv, err := own.ECDH()
	if err != nil {
		return nil, err
	}
	secret, err := priv.ECDH(peer)
	if err != nil {
		return nil, err
	}
	a, b := ownID, peerID
	if bytes.Compare(a, b) > 0 {
		a, b = b, a
	}
	return hkdf.Key(sha256.New, secret, nil, pairInfo+string(a)+string(b), sha256.Size)
}

// seal appends the MAC field over msg (type byte included) under key.
func seal(key, msg []byte) []byte {
	out := make([]byte, 0, len(msg)+macTrailer)
	out = append(out, msg...)
	out = append(out, macPrefix...)
	return append(out, macOf(key, msg)...)
}

func macOf(key, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	return h.Sum(nil)[:macLen]
}

// unseal splits a received message into what was authenticated and its
// MAC; ok is false when it carries no MAC field at its end.
func unseal(buf []byte) (signed, mac []byte, ok bool) {
	if len(buf) < 1+macTrailer {
		return nil, nil, false
	}
	cut := len(buf) - macTrailer
	if !bytes.Equal(buf[cut:cut+len(macPrefix)], macPrefix) {
		return nil, nil, false
	}
	return buf[:cut], buf[cut+len(macPrefix):], true
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

// peerKey is what a member keeps of another's verified certificate: its
// key id and the key the two share.
type peerKey struct {
	keyID []byte
	pair  []byte
}
