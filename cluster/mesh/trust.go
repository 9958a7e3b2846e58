package mesh

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
)

// Reasons a message or a member is refused by the identity checks, the
// label of rolter_gossip_rejected_total.
const (
	rejectNoMAC      = iota // no MAC: the sender has no identity, or forged one
	rejectUnknownKey        // no verified certificate for the claimed sender (yet)
	rejectBadMAC            // a MAC, but not under the key shared with the claimed sender
	rejectBadCert           // a certificate the CA did not sign, expired, or naming another member
	rejectNoIdentity        // a member announcing no certificate asked to join
	rejectNameTaken         // a member asked to join under a live member's name with another key
	rejectReplay            // a MAC that checks, on a message number already taken (or none)
	rejectWrongRole         // a certificate for one role, its holder announcing the other
	numRejectReasons
)

var rejectReasons = [numRejectReasons]string{"no_mac", "unknown_key", "bad_mac", "bad_certificate", "no_identity",
	"name_taken", "replay", "wrong_role"}

// Errors returned to memberlist to refuse a member (it logs them).
var (
	errNoIdentity = errors.New("mesh: member announces no certificate; this pool requires gossip identity")
	errNameTaken  = errors.New("mesh: name held by a live member under another certificate")
)

// identityAskEvery rate-limits certificate requests and resends per member.
const identityAskEvery = time.Second

// maxPeers bounds the certificates a member keeps.
const maxPeers = 4096

func (c *core) reject(reason int) { c.stats.Rejected[reason].Add(1) }

// identity is this member's current certificate; nil when it has none.
func (c *core) identity() *Identity { return c.id.Load() }

// Certificate is the certificate this member's messages are authenticated
// under now (nil without identity).
func (c *core) Certificate() *x509.Certificate {
	if id := c.identity(); id != nil {
		return id.Leaf
	}
	return nil
}

// SetIdentity replaces this member's certificate with a renewed one, for
// the same name and role: from now on its messages are sealed under the
// keys the new one derives, its meta announces the new key id, and every
// live member is sent the new certificate. A member that started without
// an identity cannot take one. For a moment the others may refuse what
// it sends (unknown_key, bad_mac) until they hold the new certificate.
func (c *core) SetIdentity(id *Identity) error {
	if c.identity() == nil {
		return fmt.Errorf("%w: this member started without one", ErrIdentity)
	}
	if err := id.check(c.now()); err != nil {
		return err
	}
	if id.Name() != c.cfg.Name {
		return fmt.Errorf("%w: the new certificate is issued to %q, not to this member %q", ErrIdentity, id.Name(), c.cfg.Name)
	}
	if id.Role() != c.cfg.Meta.Role {
		return fmt.Errorf("%w: the new certificate grants the role %s, this member is a %s", ErrIdentity, id.Role(), c.cfg.Meta.Role)
	}
	if bytes.Equal(id.Chain[0], c.identity().Chain[0]) {
		c.id.Store(id) // the same certificate (the CA bundle may have changed)
		return nil
	}
	meta := c.cfg.Meta
	meta.keyID = id.keyID
	b, err := encodeMeta(&meta)
	if err != nil {
		return err
	}
	c.id.Store(id)
	c.meta.Store(&b)
	var err2 error
	if c.ml != nil {
		err2 = c.ml.UpdateNode(identityUpdateTimeout)
	}
	c.idMu.Lock()
	clear(c.idSent)
	c.idMu.Unlock()
	c.eachMember(func(name string, _ member) {
		if name != c.cfg.Name {
			c.sendIdentity(name, false)
		}
	})
	return err2
}

// ApplyIdentity is SetIdentity for a key pair and CA pool as loaded from
// the --gossip-tls-* files (certs.Source.OnReload).
func (c *core) ApplyIdentity(pair *tls.Certificate, roots *x509.CertPool) error {
	id, err := NewIdentity(pair, roots)
	if err != nil {
		return err
	}
	return c.SetIdentity(id)
}

// identityUpdateTimeout bounds how long SetIdentity waits for memberlist
// to broadcast the new meta.
const identityUpdateTimeout = 2 * time.Second

// pairFor returns the session this member shares with the live member
// name, when its certificate has been verified, is the one it announces
// and grants the role it announces; the session is derived again when
// either end's key or session changed. Without one, reason says why.
func (c *core) pairFor(name string) (s *session, reason int) {
	id := c.identity()
	c.mu.RLock()
	m, live := c.members[name]
	p, known := c.peers[name]
	c.mu.RUnlock()
	switch {
	case !live || !known || !bytes.Equal(p.keyID, m.meta.keyID):
		return nil, rejectUnknownKey
	case p.role != m.meta.Role:
		return nil, rejectWrongRole
	}
	own := end{keyID: id.keyID, session: c.cfg.Meta.session}
	peer := end{keyID: p.keyID, session: m.meta.session}
	if s := p.sess.Load(); s != nil && s.peer.session == peer.session && bytes.Equal(s.own.keyID, own.keyID) {
		return s, 0
	}
	key, err := pairKey(id.Key, own, p.pub, peer)
	if err != nil {
		return nil, rejectBadCert
	}
	s = &session{own: own, peer: peer, key: key}
	if old := p.sess.Load(); p.sess.CompareAndSwap(old, s) {
		return s, 0
	}
	return p.sess.Load(), 0 // another goroutine derived it first
}

// sealFor authenticates msg for member to; ok is false (and to is asked
// for its certificate) when the two share no key yet. Without identity
// msg goes as it is.
func (c *core) sealFor(to string, msg []byte) (sealed []byte, ok bool) {
	if c.identity() == nil {
		return msg, true
	}
	s, _ := c.pairFor(to)
	if s == nil {
		c.askIdentity(to)
		return nil, false
	}
	return seal(s.key, c.numbersOf(to).sent.Add(1), msg), true
}

// numbersOf returns the message numbers this member keeps for peer name,
// making them on first use. Past maxPeers names, those of members no
// longer live are forgotten.
func (c *core) numbersOf(name string) *numbers {
	c.numMu.Lock()
	defer c.numMu.Unlock()
	nb, ok := c.nums[name]
	if ok {
		return nb
	}
	if len(c.nums) >= maxPeers {
		c.mu.RLock()
		for n := range c.nums {
			if _, live := c.members[n]; !live {
				delete(c.nums, n)
			}
		}
		c.mu.RUnlock()
	}
	nb = &numbers{}
	if len(c.nums) < maxPeers {
		c.nums[name] = nb
	}
	return nb
}

// verified returns the body of buf (type byte first) when its MAC is
// under the key this member shares with the member it names as its
// sender and its number was not taken before in their session, else nil
// (the refusal counted). A message from a live member whose certificate
// has not arrived asks that member for it.
func (c *core) verified(buf []byte) []byte {
	signed, mac, ok := unseal(buf)
	if !ok {
		c.reject(rejectNoMAC)
		return nil
	}
	from, err := eachField(signed[1:], func(field) error { return nil })
	if err != nil {
		c.stats.Malformed.Add(1)
		return nil
	}
	s, reason := c.pairFor(from)
	if s == nil {
		c.reject(reason)
		if _, live := c.memberByName(from); live && from != c.cfg.Name && reason == rejectUnknownKey {
			c.askIdentity(from)
		}
		return nil
	}
	if !hmac.Equal(mac, macOf(s.key, signed)) {
		c.reject(rejectBadMAC)
		return nil
	}
	msg, n, ok := numbered(signed)
	if !ok || !c.numbersOf(from).take(s.key, n) {
		c.reject(rejectReplay)
		return nil
	}
	return msg[1:]
}

// handleIdentity files a member's certificate once it verifies against the
// CA and grants a role. Without an identity of its own a member ignores
// certificates.
func (c *core) handleIdentity(body []byte) error {
	id := c.identity()
	if id == nil {
		return nil
	}
	m, err := decodeIdentity(body)
	if err != nil {
		return err
	}
	leaf, err := verifyChain(m.Chain, id.Roots, c.now())
	role := Role(0)
	if err == nil {
		role = certRole(leaf)
	}
	if err != nil || leaf.Subject.CommonName != m.From || role == 0 {
		c.reject(rejectBadCert)
		c.log.Debug("gossip certificate refused", "claimed", m.From, "err", err, "role", role)
		return nil
	}
	pub, err := exchangeKey(leaf.PublicKey)
	if err != nil {
		c.reject(rejectBadCert)
		return nil
	}
	kid := keyIDOf(m.Chain[0])
	c.mu.Lock()
	old, had := c.peers[m.From]
	mem, live := c.members[m.From]
	// Keep the certificate the live member announces; replace one it no
	// longer announces (a renewal), and take any while it is not known.
	// The same certificate again (a member asked for it) keeps the entry.
	if (had || len(c.peers) < maxPeers) && !(had && bytes.Equal(old.keyID, kid)) &&
		(!had || !live || bytes.Equal(kid, mem.meta.keyID) || !bytes.Equal(old.keyID, mem.meta.keyID)) {
		c.peers[m.From] = &peerKey{keyID: kid, role: role, pub: pub}
	}
	c.mu.Unlock()
	if live && mem.meta.Role != role {
		c.log.Warn("gossip member announces a role its certificate does not grant; its messages are refused",
			"node_id", m.From, "announces", mem.meta.Role.String(), "certificate", role.String())
	}
	if m.Reply {
		c.sendIdentity(m.From, false)
	}
	return nil
}

type identityReq struct {
	to    string
	reply bool
}

// sendIdentity queues this member's certificate for member to, at most
// once per identityAskEvery; reply asks for its certificate back. It
// never blocks.
func (c *core) sendIdentity(to string, reply bool) {
	now := c.now()
	c.idMu.Lock()
	last := c.idSent[to]
	recent := now.Sub(last) < identityAskEvery
	if !recent {
		if len(c.idSent) >= maxPeers {
			clear(c.idSent)
		}
		c.idSent[to] = now
	}
	c.idMu.Unlock()
	if recent {
		return
	}
	select {
	case c.idOut <- identityReq{to: to, reply: reply}:
	default: // the member asks again when it needs it
	}
}

// askIdentity asks a live member for its certificate (sending ours), at
// most once per identityAskEvery.
func (c *core) askIdentity(name string) {
	now := c.now()
	c.idMu.Lock()
	recent := now.Sub(c.idAsked[name]) < identityAskEvery
	if !recent {
		if len(c.idAsked) >= maxPeers {
			clear(c.idAsked)
		}
		c.idAsked[name] = now
		delete(c.idSent, name) // the request goes now, whatever was sent before
	}
	c.idMu.Unlock()
	if !recent {
		c.sendIdentity(name, true)
	}
}

// identityLoop sends queued certificates by TCP, off memberlist's
// goroutines.
func (c *core) identityLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-c.idOut:
			mem, ok := c.memberByName(req.to)
			if !ok {
				continue
			}
			// The current certificate: SetIdentity may have replaced it.
			c.sendPlain(mem.node, encodeIdentity(&identityMsg{From: c.cfg.Name, Chain: c.identity().Chain, Reply: req.reply}))
		}
	}
}

// aliveDelegate is the memberlist.AliveDelegate of a member with an
// identity: it binds a name to one certificate while its holder lives.
type aliveDelegate core

// NotifyAlive refuses a member that announces no certificate, and one
// that takes the name of a live member at another address under another
// certificate (logged once per address pair, naming both).
func (a *aliveDelegate) NotifyAlive(peer *memberlist.Node) error {
	c := (*core)(a)
	if peer.Name == c.cfg.Name {
		return nil
	}
	meta, err := decodeMeta(peer.Meta)
	if err != nil {
		return err
	}
	if len(meta.keyID) == 0 {
		c.reject(rejectNoIdentity)
		return errNoIdentity
	}
	c.mu.RLock()
	held, ok := c.members[peer.Name]
	cert, verified := c.peers[peer.Name]
	c.mu.RUnlock()
	// Only a holder whose certificate verified is protected: a member that
	// announced a key it cannot prove holds no name.
	verified = verified && ok && bytes.Equal(cert.keyID, held.meta.keyID)
	if verified && !bytes.Equal(held.meta.keyID, meta.keyID) && held.node.Address() != peer.Address() {
		c.reject(rejectNameTaken)
		t := &c.taken
		key := [2]string{held.node.Address(), peer.Address()}
		t.mu.Lock()
		if t.seen == nil {
			t.seen = map[[2]string]bool{}
		}
		logIt := !t.seen[key] && len(t.seen) < 64
		t.seen[key] = true
		t.mu.Unlock()
		if logIt {
			c.log.Error("gossip join refused: the name is held by a live member under another certificate",
				"node_id", peer.Name, "held_by", held.node.Address(), "refused", peer.Address())
		}
		return errNameTaken
	}
	return nil
}
