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
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
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

	keyID []byte // keyIDOf(Chain[0]), set by check
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
	return NewIdentity(&pair, roots)
}

// NewIdentity is the identity of a loaded key pair (an ECDSA P-256 key)
// under the CA pool roots.
func NewIdentity(pair *tls.Certificate, roots *x509.CertPool) (*Identity, error) {
	if pair == nil || len(pair.Certificate) == 0 || roots == nil {
		return nil, fmt.Errorf("%w: certificate, key and CA are all required", ErrIdentity)
	}
	leaf := pair.Leaf
	if leaf == nil {
		var err error
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

// Role returns the role the certificate grants (see RoleURI); 0 when it
// names none or both.
func (id *Identity) Role() Role { return certRole(id.Leaf) }

// RoleURI is the URI SAN a member certificate carries to say what its
// holder may be in the pool: "rolter:router" or "rolter:sidecar". A
// certificate must carry exactly one, so a sidecar's certificate cannot
// speak as a router.
func RoleURI(r Role) string { return "rolter:" + r.String() }

// certRole is the one role leaf's URI SANs grant, else 0.
func certRole(leaf *x509.Certificate) Role {
	var got Role
	for _, u := range leaf.URIs {
		var r Role
		switch u.String() {
		case RoleURI(RoleRouter):
			r = RoleRouter
		case RoleURI(RoleSidecar):
			r = RoleSidecar
		default:
			continue
		}
		if got != 0 && got != r {
			return 0
		}
		got = r
	}
	return got
}

// RoleURL is RoleURI as a *url.URL, for x509.Certificate.URIs.
func RoleURL(r Role) *url.URL { return &url.URL{Scheme: "rolter", Opaque: r.String()} }

// check verifies that the identity is usable: a P-256 key, a name, a role,
// and a certificate the CA signed that is valid at now.
func (id *Identity) check(now time.Time) error {
	if id.Leaf == nil || id.Key == nil || id.Roots == nil || len(id.Chain) == 0 {
		return fmt.Errorf("%w: certificate, key and CA are all required", ErrIdentity)
	}
	if id.Name() == "" {
		return fmt.Errorf("%w: the certificate has no common name (the member name)", ErrIdentity)
	}
	if id.Role() == 0 {
		return fmt.Errorf("%w: the certificate of %q names no role: issue it with exactly one URI SAN, %s or %s",
			ErrIdentity, id.Name(), RoleURI(RoleRouter), RoleURI(RoleSidecar))
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
	id.keyID = keyIDOf(id.Chain[0])
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

// counterField carries a message's number in its session with the
// receiver (fixed64), just before the MAC; macField carries the MAC. The
// MAC is the last field, so the authenticated bytes are everything before
// it, the number included.
const (
	counterField protowire.Number = 99
	macField     protowire.Number = 100
)

// counterTrailer is the encoded counter field (a 2-byte tag and 8 bytes);
// macTrailer the encoded MAC field (a 2-byte tag, a length byte and the
// MAC); sealOverhead both.
const (
	counterTrailer = 2 + 8
	macTrailer     = 2 + 1 + macLen
	sealOverhead   = counterTrailer + macTrailer
)

var (
	counterPrefix = protowire.AppendTag(nil, counterField, protowire.Fixed64Type)
	macPrefix     = protowire.AppendVarint(protowire.AppendTag(nil, macField, protowire.BytesType), macLen)
)

// pairInfo separates rolter's pair keys from any other use of the ECDH
// secret. v2 binds the key to both members' sessions.
const pairInfo = "rolter gossip pair key v2"

// exchangeKey is a certificate's public key as an ECDH key.
func exchangeKey(pub any) (*ecdh.PublicKey, error) {
	k, ok := pub.(*ecdsa.PublicKey)
	if !ok || k.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%w: the certificate's key is %T; gossip identity needs ECDSA P-256", ErrIdentity, pub)
	}
	return k.ECDH()
}

// end is one member's part of a pair key: its certificate's key id and
// the session it announces (a random number drawn at each start).
type end struct {
	keyID   []byte
	session uint64
}

// pairKey derives the key two members share in their current sessions:
// HKDF-SHA256 over their ECDH secret, bound to both ends (in key id
// order). A restart of either member draws a new session, so a message
// recorded before it never checks again.
func pairKey(own *ecdsa.PrivateKey, ownEnd end, peer *ecdh.PublicKey, peerEnd end) ([]byte, error) {
	priv, err := own.ECDH()
	if err != nil {
		return nil, err
	}
	secret, err := priv.ECDH(peer)
	if err != nil {
		return nil, err
	}
	a, b := ownEnd, peerEnd
	if bytes.Compare(a.keyID, b.keyID) > 0 {
		a, b = b, a
	}
	info := make([]byte, 0, len(pairInfo)+2*(keyIDLen+8))
	info = append(info, pairInfo...)
	info = binary.BigEndian.AppendUint64(append(info, a.keyID...), a.session)
	info = binary.BigEndian.AppendUint64(append(info, b.keyID...), b.session)
	return hkdf.Key(sha256.New, secret, nil, string(info), sha256.Size)
}

// seal appends message number n and the MAC over msg (type byte
// included) and n under key.
func seal(key []byte, n uint64, msg []byte) []byte {
	out := make([]byte, 0, len(msg)+sealOverhead)
	out = append(out, msg...)
	out = binary.LittleEndian.AppendUint64(append(out, counterPrefix...), n)
	mac := macOf(key, out)
	out = append(out, macPrefix...)
	return append(out, mac...)
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

// numbered splits authenticated bytes into the message and its number;
// ok is false when they do not end with a number.
func numbered(signed []byte) (msg []byte, n uint64, ok bool) {
	if len(signed) < 1+counterTrailer {
		return nil, 0, false
	}
	cut := len(signed) - counterTrailer
	if !bytes.Equal(signed[cut:cut+len(counterPrefix)], counterPrefix) {
		return nil, 0, false
	}
	return signed[:cut], binary.LittleEndian.Uint64(signed[cut+len(counterPrefix):]), true
}

// replayWindow is the receiving end of a session's message numbers: the
// highest taken and which of the replayWindowSize below it were. UDP
// reorders, so a number below the highest is taken once while it is in
// the window; one taken before, or older than the window, is a replay.
type replayWindow struct {
	top  uint64
	seen [replayWindowSize / 64]uint64 // bit i: top-i was taken
}

// replayWindowSize is how far (in messages of one sender to one receiver)
// a message may fall behind and still be taken: a sidecar sends a router
// about 25 a second, so a TCP send may lag the UDP ones by 10 s.
const replayWindowSize = 256

// take reports whether n is new, and records it.
func (w *replayWindow) take(n uint64) bool {
	if n == 0 {
		return false
	}
	if n > w.top {
		w.shift(n - w.top)
		w.top = n
		w.seen[0] |= 1
		return true
	}
	back := w.top - n
	if back >= replayWindowSize {
		return false
	}
	word, bit := back/64, uint64(1)<<(back%64)
	if w.seen[word]&bit != 0 {
		return false
	}
	w.seen[word] |= bit
	return true
}

// shift moves the window up by d numbers.
func (w *replayWindow) shift(d uint64) {
	if d >= replayWindowSize {
		w.seen = [replayWindowSize / 64]uint64{}
		return
	}
	words, bitsN := int(d/64), d%64
	for i := len(w.seen) - 1; i >= 0; i-- {
		var v uint64
		if j := i - words; j >= 0 {
			v = w.seen[j] << bitsN
			if bitsN > 0 && j > 0 {
				v |= w.seen[j-1] >> (64 - bitsN)
			}
		}
		w.seen[i] = v
	}
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
// key id, the role it grants, its ECDH key, and the session keyed on it.
type peerKey struct {
	keyID []byte
	role  Role
	pub   *ecdh.PublicKey
	sess  atomic.Pointer[session]
}

// session is the key two members share in their current sessions, and
// what it was derived from.
type session struct {
	own, peer end
	key       []byte
}

// numbers is what a member keeps per peer name about message numbers:
// the last it gave a message sealed for the peer, and the window of those
// it took from the peer under key. Both outlive the peer's certificate
// entry (a member that leaves and rejoins in the same session keeps its
// numbering), so a partition that heals neither restarts a sender's
// numbers below the receiver's window nor opens a fresh window to replays.
type numbers struct {
	sent   atomic.Uint64
	mu     sync.Mutex
	key    []byte // the session key window is for; another key resets it
	window replayWindow
}

// take reports whether message number n, sealed under key, is new.
func (nb *numbers) take(key []byte, n uint64) bool {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	if !bytes.Equal(nb.key, key) {
		nb.key, nb.window = key, replayWindow{}
	}
	return nb.window.take(n)
}
