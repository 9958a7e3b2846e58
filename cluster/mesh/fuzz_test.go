package mesh

import (
	"math"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/rolter/rolter/internal/testwait"
)

// fuzzSeeds are valid messages of every type, plus a few near misses, so
// the fuzzer starts from the wire format rather than from noise.
func fuzzSeeds() [][]byte {
	return [][]byte{
		encodeResidency(msgResidencyDelta, &residencyMsg{From: "sidecar-0", Epoch: 3, Seq: 9, State: StateExact,
			Added: []uint64{1, 2, 3, 1 << 40}, Removed: []uint64{7}, Count: 4, Digest: 0xabcdef}),
		encodeResidency(msgResidencyFull, &residencyMsg{From: "sidecar-0", Epoch: 3, Seq: 9,
			Added: []uint64{math.MaxUint64, 0, 5}, Count: 3, Digest: 1}),
		encodeResidency(msgResidencyDelta, &residencyMsg{From: "s", Seq: 2, Cleared: true, State: StateDegraded}),
		encodeStatus(&statusMsg{From: "sidecar-0", Seq: 5, Epoch: 3, ResSeq: 9, Count: 4, Digest: 2, ResState: StateExact,
			Status: EngineStatus{MetricsOK: true, Running: 3, Waiting: 1, KVUsage: 0.5, PrefixHits: 10, PrefixQueries: 20,
				BlockSize: 16, MaxLoras: 2, Adapters: []string{"a", "b"}, LMCacheKnown: true, LMCacheOccupancy: 0.25,
				LMCacheAvailable: true}}),
		encodeResync(&resyncMsg{From: "router-0", Epoch: 3, HaveSeq: 4, Missing: []uint64{5, 7, 9}}),
		encodeResync(&resyncMsg{From: "router-0", Epoch: 3, Full: true}),
		encodeInflight(&inflightMsg{From: "router-1", Entries: []inflightEntry{{URL: "http://127.0.0.1:1", N: 4}, {URL: "x", N: 0}}}),
		encodeLearned(&learnedMsg{From: "router-1", Records: []Learned{
			{Kind: LearnedPrefix, Model: "m", Target: "http://127.0.0.1:1", Key: 42, TTL: time.Minute},
			{Kind: LearnedPin, Target: "http://127.0.0.1:2", Key: 1}}}),
		{msgEngineStatus, 0x08, 0x01, 0x12, 0x01, 's', 0x65, 0xff, 0xff, 0xff, 0x7f},               // NaN KV usage
		{msgResidencyDelta, 0x08, 0x01, 0x12, 0x01, 's', 0x3a, 0x05, 0xff, 0xff, 0xff, 0xff, 0xff}, // truncated varint key
		{metaPrefix, metaFormat, 0x08, 0x02, 0x1a, 0x04, 'h', 't', 't', 'p'},
		{99},
	}
}

// metaPrefix is a pseudo type byte under which the fuzzer exercises the node
// meta decoder (meta travels in memberlist's alive messages, not as a
// message of ours).
const metaPrefix byte = 0xfe

// FuzzDecode feeds arbitrary bytes to every mesh message decoder (the type
// byte picks it) and checks that none panics, that what a decoder accepts
// respects every bound (so a message cannot make a router hold more than a
// small multiple of its own size), and that an accepted message survives
// re-encoding unchanged.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		typ, body := b[0], b[1:]
		switch typ {
		case msgResidencyDelta, msgResidencyFull:
			checkResidency(t, typ, body)
		case msgEngineStatus:
			checkStatus(t, body)
		case msgResync:
			checkResync(t, body)
		case msgInflight:
			checkInflight(t, body)
		case msgLearned:
			checkLearned(t, body)
		case metaPrefix:
			checkMeta(t, body)
		default:
			// Every decoder must refuse garbage under any type byte.
			for _, dec := range []func([]byte) error{
				func(b []byte) error { _, err := decodeResidency(b, maxKeysPerMsg); return err },
				func(b []byte) error { _, err := decodeStatus(b); return err },
				func(b []byte) error { _, err := decodeResync(b); return err },
				func(b []byte) error { _, err := decodeInflight(b); return err },
				func(b []byte) error { _, err := decodeLearned(b); return err },
				func(b []byte) error { _, err := decodeMeta(b); return err },
			} {
				_ = dec(body)
			}
		}
	})
}

func checkSender(t *testing.T, from string) {
	t.Helper()
	if from == "" || len(from) > maxStringLen {
		t.Fatalf("accepted sender name of %d bytes", len(from))
	}
}

func checkResidency(t *testing.T, typ byte, body []byte) {
	const limit = 4096
	m, err := decodeResidency(body, limit)
	if err != nil {
		return
	}
	checkSender(t, m.From)
	keys := len(m.Added) + len(m.Removed)
	if keys > limit {
		t.Fatalf("decoded %d keys over the limit %d", keys, limit)
	}
	if keys > len(body) { // every key costs at least one byte on the wire
		t.Fatalf("%d keys out of %d bytes", keys, len(body))
	}
	if m.State > StateDegraded {
		t.Fatalf("accepted residency state %d", m.State)
	}
	again, err := decodeResidency(encodeResidency(typ, cloneResidency(m))[1:], limit)
	if err != nil {
		t.Fatalf("re-encoded message refused: %v", err)
	}
	if again.From != m.From || again.Epoch != m.Epoch || again.Seq != m.Seq || again.Cleared != m.Cleared ||
		again.State != m.State || again.Count != m.Count || again.Digest != m.Digest ||
		!slices.Equal(again.Added, sorted(m.Added)) || !slices.Equal(again.Removed, sorted(m.Removed)) {
		t.Fatalf("round trip changed the message:\n%+v\n%+v", summarize(m), summarize(again))
	}
}

func cloneResidency(m *residencyMsg) *residencyMsg {
	c := *m
	c.Added, c.Removed = slices.Clone(m.Added), slices.Clone(m.Removed)
	return &c
}

func checkStatus(t *testing.T, body []byte) {
	m, err := decodeStatus(body)
	if err != nil {
		return
	}
	checkSender(t, m.From)
	s := m.Status
	if s.Running > maxCount || s.Waiting > maxCount || s.BlockSize > maxCount || s.MaxLoras > maxCount {
		t.Fatalf("counts not clamped: %+v", s)
	}
	for _, f := range []float64{s.KVUsage, s.LMCacheOccupancy} {
		if math.IsNaN(f) || f < 0 || f > 1 {
			t.Fatalf("fraction %v outside [0,1]", f)
		}
	}
	if len(s.Adapters) > maxAdapters {
		t.Fatalf("%d adapters over the cap %d", len(s.Adapters), maxAdapters)
	}
	for _, a := range s.Adapters {
		if len(a) > maxStringLen {
			t.Fatalf("adapter name of %d bytes", len(a))
		}
	}
	if m.ResState > StateDegraded {
		t.Fatalf("accepted residency state %d", m.ResState)
	}
	again, err := decodeStatus(encodeStatus(m)[1:])
	if err != nil {
		t.Fatalf("re-encoded status refused: %v", err)
	}
	want := *m
	if !want.Status.LMCacheKnown {
		want.Status.LMCacheOccupancy = 0 // not sent when unknown
	}
	// Floats travel as float32.
	want.Status.KVUsage = float64(float32(want.Status.KVUsage))
	want.Status.LMCacheOccupancy = float64(float32(want.Status.LMCacheOccupancy))
	if again.From != want.From || again.Seq != want.Seq || again.Status.Running != want.Status.Running ||
		again.Status.KVUsage != want.Status.KVUsage || again.Status.LMCacheOccupancy != want.Status.LMCacheOccupancy ||
		!slices.Equal(again.Status.Adapters, want.Status.Adapters) {
		t.Fatalf("round trip changed the status:\n%+v\n%+v", want, *again)
	}
}

func checkResync(t *testing.T, body []byte) {
	m, err := decodeResync(body)
	if err != nil {
		return
	}
	checkSender(t, m.From)
	if len(m.Missing) > maxMissing {
		t.Fatalf("%d missing sequence numbers over the cap %d", len(m.Missing), maxMissing)
	}
	prev := m.HaveSeq
	for _, q := range m.Missing {
		if q <= prev && prev-q < 1<<63 { // strictly increasing modulo wrap-around
			t.Fatalf("missing list not increasing after %d: %v", m.HaveSeq, m.Missing)
		}
		prev = q
	}
}

func checkInflight(t *testing.T, body []byte) {
	m, err := decodeInflight(body)
	if err != nil {
		return
	}
	checkSender(t, m.From)
	if len(m.Entries) > maxEntriesPerMsg || len(m.Entries) > len(body) {
		t.Fatalf("%d in-flight entries from %d bytes", len(m.Entries), len(body))
	}
	for _, e := range m.Entries {
		if e.URL == "" || len(e.URL) > maxStringLen || e.N > maxCount {
			t.Fatalf("entry not bounded: %q %d", e.URL, e.N)
		}
	}
}

func checkLearned(t *testing.T, body []byte) {
	m, err := decodeLearned(body)
	if err != nil {
		return
	}
	checkSender(t, m.From)
	if len(m.Records) > maxEntriesPerMsg || len(m.Records) > len(body) {
		t.Fatalf("%d learned records from %d bytes", len(m.Records), len(body))
	}
	for _, r := range m.Records {
		if (r.Kind != LearnedPrefix && r.Kind != LearnedPin) || r.Target == "" ||
			len(r.Target) > maxStringLen || len(r.Model) > maxStringLen || r.TTL < 0 || r.TTL > maxLearnedTTL ||
			r.From != m.From {
			t.Fatalf("record not bounded: %+v", r)
		}
	}
}

func checkMeta(t *testing.T, body []byte) {
	m, err := decodeMeta(body)
	if err != nil {
		return
	}
	if m.Role != RoleRouter && m.Role != RoleSidecar {
		t.Fatalf("accepted role %d", m.Role)
	}
	if len(m.Models) > 16 || len(m.EngineURL) > 2*maxStringLen {
		t.Fatalf("meta not bounded: %d models, engine URL of %d bytes", len(m.Models), len(m.EngineURL))
	}
}

// FuzzRouterReceive delivers arbitrary message bodies, under every type
// byte and in the name of a live sidecar, to a running router: whatever
// they say, the router must not panic, and its view must stay within its
// caps.
func FuzzRouterReceive(f *testing.F) {
	for _, s := range fuzzSeeds() {
		if len(s) > 0 && s[0] <= msgLearned {
			f.Add(s[0], s[1:])
		}
	}
	const capBlocks = 2048
	h, err := NewHarness(f.Context(), HarnessConfig{Routers: 1, Sidecars: 1, Seed: 41,
		Configure: func(c *Config) { c.Router.MaxBlocksPerEngine = capBlocks; c.Router.MaxBlocksTotal = capBlocks }})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { h.Close() })
	rt, sc := h.Routers[0], h.Sidecars[0]
	testwait.For(f, 10*time.Second, "the router sees the sidecar", func() bool { return len(rt.View().Engines("")) == 1 })
	deliver := (*delegate)(rt.core).NotifyMsg
	// The sidecar's name goes last so the fuzzed body cannot override it:
	// the fuzzer then explores what a member of the pool may say.
	signed := protowire.AppendTag(nil, 2, protowire.BytesType)
	signed = protowire.AppendString(signed, sc.Name())
	f.Fuzz(func(t *testing.T, typ byte, body []byte) {
		msg := append([]byte{typ}, body...)
		deliver(msg)
		deliver(append(msg, signed...))
		tg := rt.View().Targets([]string{EngineURL(0)})
		if set := tg.engines[0].set.Load(); set != nil && set.Len() > capBlocks {
			t.Fatalf("router holds %d blocks for one engine, cap %d", set.Len(), capBlocks)
		}
		if total := rt.View().total.Load(); total > capBlocks || total < 0 {
			t.Fatalf("router's block total %d outside [0,%d]", total, capBlocks)
		}
		if q, ok := tg.Load(0); ok && q > 2*maxCount+uint64(maxEntriesPerMsg)*maxCount {
			t.Fatalf("load %d not clamped", q)
		}
	})
}
