package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/internal/testwait"
)

// LossyResult is what MeasureLossyMesh saw.
type LossyResult struct {
	Samples int // (router, engine) age samples
	// FalseDeaths counts samples in which a router did not list a live
	// engine (STALE or gone), and MemberDrops those in which a node saw
	// fewer members than the pool has.
	FalseDeaths, MemberDrops int
	AgeP50, AgeP99, AgeMax   time.Duration
	PacketsDropped, Sent     uint64
}

// MeasureLossyMesh runs an in-process pool of routers and sidecars whose
// every transport drops loss of its outbound packets, with memberlist's
// real LAN timings (mesh.FastTiming is not applied) and the mesh's default
// intervals. The sidecars publish no residency change during the window,
// so what keeps an engine fresh is its status alone (every 250 ms); every
// 100 ms it samples, at every router, the age of each engine's last
// message and whether the engine is listed as live, for window.
func MeasureLossyMesh(ctx context.Context, routers, sidecars int, loss float64, window time.Duration, seed uint64) (LossyResult, error) {
	var res LossyResult
	h, err := mesh.NewHarness(ctx, mesh.HarnessConfig{Routers: routers, Sidecars: sidecars, Seed: seed,
		Timing: &mesh.Timing{}})
	if err != nil {
		return res, err
	}
	defer h.Close()
	nodes := h.Members()
	urls := make([]string, sidecars)
	for i := range urls {
		urls[i] = mesh.EngineURL(i)
	}
	err = testwait.Poll(30*time.Second, 50*time.Millisecond, func() error {
		for _, r := range h.Routers {
			if n := len(r.View().Engines("")); n != sidecars {
				return fmt.Errorf("%s lists %d engines", r.Name(), n)
			}
		}
		for _, n := range nodes {
			if got := n.NumMembers(); got != len(nodes) {
				return fmt.Errorf("%s sees %d members", n.Name(), got)
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	for _, tr := range h.Transports {
		tr.SetLoss(loss)
	}
	var ages []time.Duration
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	key := seed << 20
	for end := time.Now().Add(window); time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
		for _, s := range h.Sidecars {
			key++
			s.Publisher().SetStatus(mesh.EngineStatus{MetricsOK: true, Running: key % 7, KVUsage: 0.3})
		}
		now := time.Now()
		for _, r := range h.Routers {
			tg := r.View().Targets(urls)
			live := map[string]bool{}
			for _, e := range r.View().Engines("") {
				live[e.EngineURL] = true
			}
			for i, u := range urls {
				age, ok := tg.Age(i, now)
				if !ok || !live[u] {
					res.FalseDeaths++
				}
				ages = append(ages, age)
			}
		}
		for _, n := range nodes {
			if n.NumMembers() != len(nodes) {
				res.MemberDrops++
			}
		}
	}
	for _, tr := range h.Transports {
		res.PacketsDropped += tr.PacketsDropped.Load()
		res.Sent += tr.PacketsSent.Load()
	}
	res.Samples = len(ages)
	res.AgeP50, res.AgeP99 = Percentile(ages, 0.50), Percentile(ages, 0.99)
	res.AgeMax = slices.Max(ages)
	return res, nil
}

// HostileNode is a gossip member that speaks the mesh wire format written
// here by hand (not through package mesh), so it can say anything: it
// announces itself as the sidecar of an engine and sends summaries with
// whatever values the test chooses, or bytes that are not a message at all.
type HostileNode struct {
	ML   *memberlist.Memberlist
	Name string
	// key and chain, when set, are a certificate from the pool's CA: the
	// node announces it; pair is the key it shares with one peer (see
	// PairWith and Seal).
	key   *ecdsa.PrivateKey
	chain [][]byte
	pair  []byte
	sent  *uint64 // the number of the last message Seal sealed
	// count and digest describe the key set the node has claimed so far,
	// computed as the mesh does (a liar can read the code), so a router's
	// consistency check accepts its claims.
	count, digest uint64
}

// fmix64 is the 64-bit finaliser of MurmurHash3; the mesh's residency
// digest is the sum of it over the keys of the set.
func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

type hostileDelegate struct{ meta []byte }

func (d *hostileDelegate) NodeMeta(limit int) []byte {
	if len(d.meta) > limit {
		return nil
	}
	return d.meta
}
func (d *hostileDelegate) NotifyMsg([]byte)                           {}
func (d *hostileDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *hostileDelegate) LocalState(bool) []byte                     { return nil }
func (d *hostileDelegate) MergeRemoteState([]byte, bool)              {}

// hostileSession is the session a hostile node with a certificate
// announces (field 11 of its meta); the pair keys are bound to it.
const hostileSession = 0x686f7374696c65

// hostileMeta is a sidecar's node meta: format byte 'M', then role (1),
// node id (2), engine URL (3), models (4), protocol range (6, 7) and, with
// a certificate, its key id (10: the first 16 bytes of the SHA-256 of the
// certificate's DER) and its session (11, fixed64).
func hostileMeta(nodeID, engineURL string, models []string, leafDER []byte) []byte {
	b := []byte{'M'}
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(mesh.RoleSidecar))
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, nodeID)
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendString(b, engineURL)
	for _, m := range models {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendString(b, m)
	}
	for _, f := range []protowire.Number{6, 7} {
		b = protowire.AppendTag(b, f, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(mesh.ProtocolMax))
	}
	if leafDER != nil {
		sum := sha256.Sum256(leafDER)
		b = protowire.AppendTag(b, 10, protowire.BytesType)
		b = protowire.AppendBytes(b, sum[:16])
		b = protowire.AppendTag(b, 11, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, hostileSession)
	}
	return b
}

// metaSession is the session (field 11) in the meta of the member whose
// key id (field 10) is keyID; 0 when none announces it.
func (h *HostileNode) metaSession(keyID []byte) uint64 {
	for _, m := range h.ML.Members() {
		if len(m.Meta) == 0 {
			continue
		}
		var kid []byte
		var session uint64
		for b := m.Meta[1:]; len(b) > 0; {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				break
			}
			b = b[n:]
			if num == 10 && typ == protowire.BytesType {
				kid, _ = protowire.ConsumeBytes(b)
			}
			if num == 11 && typ == protowire.Fixed64Type {
				session, _ = protowire.ConsumeFixed64(b)
			}
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				break
			}
			b = b[n:]
		}
		if bytes.Equal(kid, keyID) {
			return session
		}
	}
	return 0
}

// StartHostile joins an unencrypted pool (routers run --insecure-dev) at
// seed as node name, announcing itself as the sidecar of engineURL.
func StartHostile(name, engineURL string, models []string, seed string) (*HostileNode, error) {
	return startHostile(name, engineURL, models, seed, nil)
}

// StartHostileCertified is StartHostile for a node holding a certificate
// from the pool's CA (PEM files certFile and keyFile, an ECDSA P-256 key):
// it announces the certificate's key id in its meta, sends the certificate
// to every member after joining; after PairWith, Seal authenticates what
// it sends as the mesh does. The name it joins under need not be the
// certificate's.
func StartHostileCertified(name, engineURL string, models []string, seed, certFile, keyFile string) (*HostileNode, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("hostile node: key %T, want ECDSA", pair.PrivateKey)
	}
	h, err := startHostile(name, engineURL, models, seed, pair.Certificate)
	if err != nil {
		return nil, err
	}
	h.key = key
	// The identity message (type 7): header, then the chain (field 3).
	b := h.header(7)
	for _, der := range pair.Certificate {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, der)
	}
	h.SendAll(b, true)
	return h, nil
}

func startHostile(name, engineURL string, models []string, seed string, chain [][]byte) (*HostileNode, error) {
	mc := memberlist.DefaultLANConfig()
	mc.Name = name
	mc.BindAddr, mc.AdvertiseAddr = "127.0.0.1", "127.0.0.1"
	mc.BindPort, mc.AdvertisePort = 0, 0
	var leaf []byte
	if len(chain) > 0 {
		leaf = chain[0]
	}
	mc.Delegate = &hostileDelegate{meta: hostileMeta(name, engineURL, models, leaf)}
	mc.Logger = log.New(io.Discard, "", 0)
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, err
	}
	if _, err := ml.Join([]string{seed}); err != nil {
		ml.Shutdown()
		return nil, err
	}
	return &HostileNode{ML: ml, Name: name, chain: chain, sent: new(uint64)}, nil
}

// PairWith derives the key this node shares with the holder of the
// certificate in peerCertFile (PEM) in their current sessions, as the
// mesh does: HKDF-SHA256 over their P-256 ECDH secret, info "rolter gossip
// pair key v2" followed by each end's key id (the first 16 bytes of its
// certificate's SHA-256) and session (big-endian), the ends in key id
// order.
func (h *HostileNode) PairWith(peerCertFile string) error {
	if h.key == nil {
		return errors.New("hostile node: no certificate")
	}
	pemBytes, err := os.ReadFile(peerCertFile)
	if err != nil {
		return err
	}
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return errors.New("hostile node: no PEM block in " + peerCertFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return fmt.Errorf("hostile node: peer key %T", cert.PublicKey)
	}
	peer, err := pub.ECDH()
	if err != nil {
		return err
	}
	own, err := h.key.ECDH()
	if err != nil {
		return err
	}
	secret, err := own.ECDH(peer)
	if err != nil {
		return err
	}
	a, b := sha256.Sum256(h.chain[0]), sha256.Sum256(block.Bytes)
	type end struct {
		id      []byte
		session uint64
	}
	ends := []end{{a[:16], hostileSession}, {b[:16], h.metaSession(b[:16])}}
	slices.SortFunc(ends, func(x, y end) int { return bytes.Compare(x.id, y.id) })
	info := []byte("rolter gossip pair key v2")
	for _, e := range ends {
		info = binary.BigEndian.AppendUint64(append(info, e.id...), e.session)
	}
	h.pair, err = hkdf.Key(sha256.New, secret, nil, string(info), sha256.Size)
	return err
}

// Seal authenticates msg as the mesh does: its number in the session
// (field 99, fixed64) and the first 16 bytes of the HMAC-SHA256 under the
// pair key of everything before it (field 100) at the end; a node
// without a pair key returns msg as it is.
func (h *HostileNode) Seal(msg []byte) []byte {
	if h.pair == nil {
		return msg
	}
	*h.sent++
	out := protowire.AppendTag(slices.Clone(msg), 99, protowire.Fixed64Type)
	out = protowire.AppendFixed64(out, *h.sent)
	mac := hmac.New(sha256.New, h.pair)
	mac.Write(out)
	out = protowire.AppendTag(out, 100, protowire.BytesType)
	return protowire.AppendBytes(out, mac.Sum(nil)[:16])
}

// As returns a copy of h that writes sender name from into the messages
// it encodes (a forgery in another member's name); it sends through h.
func (h *HostileNode) As(from string) *HostileNode {
	c := *h
	c.Name = from
	c.count, c.digest = 0, 0
	return &c
}

// Learned encodes a learned-record batch (type 6) of one session pin for
// target under key.
func (h *HostileNode) Learned(target string, key uint64) []byte {
	b := h.header(6)
	var rec []byte
	rec = appendVarintField(rec, 1, 2) // pin
	rec = protowire.AppendTag(rec, 2, protowire.BytesType)
	rec = protowire.AppendString(rec, "meta-llama/Llama-3.1-8B-Instruct")
	rec = protowire.AppendTag(rec, 3, protowire.BytesType)
	rec = protowire.AppendString(rec, target)
	rec = protowire.AppendTag(rec, 4, protowire.Fixed64Type)
	rec = protowire.AppendFixed64(rec, key)
	rec = appendVarintField(rec, 5, 60_000) // TTL ms
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	return protowire.AppendBytes(b, rec)
}

// Close leaves nothing behind: the node stops without a leave message, as
// a crashed process would.
func (h *HostileNode) Close() { h.ML.Shutdown() }

func (h *HostileNode) header(typ byte) []byte {
	b := []byte{typ}
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(mesh.ProtocolMax))
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendString(b, h.Name)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// Status encodes an engine status (type 3) claiming running and waiting
// requests and KV usage kv (any float, even out of range).
func (h *HostileNode) Status(seq, running, waiting uint64, kv float32) []byte {
	b := h.header(3)
	b = appendVarintField(b, 3, seq)
	b = appendVarintField(b, 4, 1) // epoch
	b = appendVarintField(b, 9, 1) // metrics ok
	b = appendVarintField(b, 10, running)
	b = appendVarintField(b, 11, waiting)
	b = protowire.AppendTag(b, 12, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, math.Float32bits(kv))
	return appendVarintField(b, 15, 16) // block size
}

// Residency encodes a full state (type 2) or a delta (type 1) of epoch 1
// claiming keys (assumed new and distinct), with the count and digest of
// everything claimed since the last full state.
func (h *HostileNode) Residency(full bool, seq uint64, keys []uint64) []byte {
	typ := byte(1)
	if full {
		typ = 2
		h.count, h.digest = 0, 0
	}
	b := h.header(typ)
	b = appendVarintField(b, 3, 1)
	b = appendVarintField(b, 4, seq)
	b = protowire.AppendTag(b, 8, protowire.BytesType) // fixed64 keys
	b = protowire.AppendVarint(b, uint64(8*len(keys)))
	for _, k := range keys {
		b = protowire.AppendFixed64(b, k)
		h.digest += fmix64(k)
	}
	h.count += uint64(len(keys))
	b = appendVarintField(b, 11, h.count)
	b = protowire.AppendTag(b, 12, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, h.digest)
}

// SendAll sends msg to every other member, by UDP (reliable false) or by
// TCP stream; it returns how many sends failed.
func (h *HostileNode) SendAll(msg []byte, reliable bool) int {
	failed := 0
	for _, m := range h.ML.Members() {
		if m.Name == h.Name || m.Name == h.ML.LocalNode().Name {
			continue
		}
		var err error
		if reliable {
			err = h.ML.SendReliable(m, msg)
		} else {
			err = h.ML.SendBestEffort(m, msg)
		}
		if err != nil {
			failed++
		}
	}
	return failed
}

// MetricSum sums every sample of metric (labelled or not) on the
// Prometheus page base+"/metrics"; ok is false when the page could not be
// read or has no such sample.
func MetricSum(ctx context.Context, base, metric string) (sum float64, ok bool) {
	code, body, err := Do(ctx, http.MethodGet, base+"/metrics", "", "")
	if err != nil || code != http.StatusOK {
		return 0, false
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		name, rest, found := strings.Cut(line, " ")
		if !found {
			continue
		}
		if i := strings.IndexByte(name, '{'); i >= 0 {
			if !strings.HasPrefix(line, metric+"{") {
				continue
			}
			_, rest, found = strings.Cut(line, "} ")
			if !found {
				continue
			}
		} else if name != metric {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err == nil {
			sum, ok = sum+v, true
		}
	}
	return sum, ok
}
