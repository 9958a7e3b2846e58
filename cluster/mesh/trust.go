package mesh

import (
	"bytes"
	"context"
	"crypto/hmac"
	"errors"
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
	numRejectReasons
)

var rejectReasons = [numRejectReasons]string{"no_mac", "unknown_key", "bad_mac", "bad_certificate", "no_identity", "name_taken"}

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

// pairFor returns the key this member shares with the live member name,
// when its certificate has been verified and is the one it announces.
func (c *core) pairFor(name string) []byte {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m, live := c.members[name]
	p, known := c.peers[name]
	if !live || !known || !bytes.Equal(p.keyID, m.meta.keyID) {
		return nil
	}
	return p.pair
}

// sealFor authenticates msg for member to; ok is false (and to is asked
// for its certificate) when the two share no key yet. Without identity
// msg goes as it is.
func (c *core) sealFor(to string, msg []byte) (sealed []byte, ok bool) {
	if c.id == nil {
		return msg, true
	}
	key := c.pairFor(to)
	if key == nil {
		c.askIdentity(to)
		return nil, false
	}
	return seal(key, msg), true
}

// verified returns the body of buf (type byte first) when its MAC is
// under the key this member shares with the member it names as its
// sender, else nil (the refusal counted). A message from a live member
// whose certificate has not arrived asks that member for it.
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
	key := c.pairFor(from)
	if key == nil {
		c.reject(rejectUnknownKey)
		if _, live := c.memberByName(from); live && from != c.cfg.Name {
			c.askIdentity(from)
		}
		return nil
	}
	if !hmac.Equal(mac, macOf(key, signed)) {
		c.reject(rejectBadMAC)
		return nil
	}
	return signed[1:]
}

// handleIdentity files a member's certificate once it verifies against the
// CA. Without an identity of its own a member ignores certificates.
func (c *core) handleIdentity(body []byte) error {
	if c.id == nil {
		return nil
	}
	m, err := decodeIdentity(body)
	if err != nil {
		return err
	}
	leaf, err := verifyChain(m.Chain, c.id.Roots, c.now())
	if err != nil || leaf.Subject.CommonName != m.From {
		c.reject(rejectBadCert)
		c.log.Debug("gossip certificate refused", "claimed", m.From, "err", err)
		return nil
	}
	pub, err := exchangeKey(leaf.PublicKey)
	if err != nil {
		c.reject(rejectBadCert)
		return nil
	}
	kid := keyIDOf(m.Chain[0])
	pair, err := pairKey(c.id.Key, c.cfg.Meta.keyID, pub, kid)
	if err != nil {
		c.reject(rejectBadCert)
		return nil
	}
	c.mu.Lock()
	old, had := c.peers[m.From]
	mem, live := c.members[m.From]
	// Keep the certificate the live member announces; replace one it no
	// longer announces (a renewal), and take any while it is not known.
	if (had || len(c.peers) < maxPeers) &&
		(!had || !live || bytes.Equal(kid, mem.meta.keyID) || !bytes.Equal(old.keyID, mem.meta.keyID)) {
		c.peers[m.From] = peerKey{keyID: kid, pair: pair}
	}
	c.mu.Unlock()
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
	msg := encodeIdentity(&identityMsg{From: c.cfg.Name, Chain: c.id.Chain})
	ask := encodeIdentity(&identityMsg{From: c.cfg.Name, Chain: c.id.Chain, Reply: true})
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-c.idOut:
			mem, ok := c.memberByName(req.to)
			if !ok {
				continue
			}
			if req.reply {
				c.sendPlain(mem.node, ask)
			} else {
				c.sendPlain(mem.node, msg)
			}
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
