package mesh

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

func randomKeys(r *rand.Rand, n int) []uint64 {
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = r.Uint64()
	}
	return keys
}

func TestResidencyRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name           string
		added, removed []uint64
		cleared        bool
	}{
		{"empty", nil, nil, false},
		{"sparse batch uses fixed64", randomKeys(r, 100), randomKeys(r, 20), false},
		{"dense full state uses gaps", randomKeys(r, 50000), nil, false},
		{"reserved key values", []uint64{0, 1, math.MaxUint64}, []uint64{2}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := residencyMsg{From: "sidecar-1", Epoch: 7, Seq: 42, Cleared: tc.cleared, State: StateDegraded,
				Added: slices.Clone(tc.added), Removed: slices.Clone(tc.removed), Count: 9, Digest: 0xfeed}
			b := encodeResidency(msgResidencyDelta, &in)
			if b[0] != msgResidencyDelta {
				t.Fatalf("type byte %d", b[0])
			}
			keys := len(tc.added) + len(tc.removed)
			if keys > 0 && len(b) > 8*keys+60 {
				t.Errorf("%d keys took %d bytes, want ≤ 8 per key + header", keys, len(b))
			}
			out, err := decodeResidency(b[1:], maxKeysPerMsg)
			if err != nil {
				t.Fatal(err)
			}
			want := in
			want.Added, want.Removed = sorted(tc.added), sorted(tc.removed)
			if out.From != want.From || out.Epoch != want.Epoch || out.Seq != want.Seq || out.Cleared != want.Cleared ||
				out.State != want.State || out.Count != want.Count || out.Digest != want.Digest ||
				!slices.Equal(out.Added, want.Added) || !slices.Equal(out.Removed, want.Removed) {
				t.Errorf("round trip mismatch:\n got %+v\nwant %+v", summarize(out), summarize(&want))
			}
		})
	}
}

func sorted(k []uint64) []uint64 {
	if k == nil {
		return nil
	}
	c := slices.Clone(k)
	slices.Sort(c)
	return c
}

func summarize(m *residencyMsg) residencyMsg {
	c := *m
	if len(c.Added) > 4 {
		c.Added = c.Added[:4]
	}
	return c
}

func TestFullStateBytesPerKey(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	m := residencyMsg{From: "s", Added: randomKeys(r, 50000)}
	b := encodeResidency(msgResidencyFull, &m)
	if per := float64(len(b)) / 50000; per > 7.5 {
		t.Errorf("full state of 50k random keys: %.2f bytes per key, want ≤ 7.5", per)
	}
}

func TestStatusRoundTripAndClamps(t *testing.T) {
	in := statusMsg{From: "s", Seq: 3, Epoch: 1, ResSeq: 5, Count: 10, Digest: 99, ResState: StateExact, Status: EngineStatus{
		MetricsOK: true, Running: 4, Waiting: 2, KVUsage: 0.5, PrefixHits: 10, PrefixQueries: 20, BlockSize: 16,
		MaxLoras: 4, Adapters: []string{"a", "b"}, LMCacheKnown: true, LMCacheOccupancy: 0.25, LMCacheAvailable: true}}
	out, err := decodeStatus(encodeStatus(&in)[1:])
	if err != nil {
		t.Fatal(err)
	}
	if out.Status.Running != 4 || out.Status.KVUsage != 0.5 || out.Status.LMCacheOccupancy != 0.25 ||
		!slices.Equal(out.Status.Adapters, []string{"a", "b"}) || out.ResSeq != 5 || out.Digest != 99 || !out.Status.LMCacheAvailable {
		t.Errorf("got %+v", out)
	}

	tests := []struct {
		name  string
		mod   func(*EngineStatus)
		check func(EngineStatus) bool
	}{
		{"absurd queue clamped", func(s *EngineStatus) { s.Running, s.Waiting = math.MaxUint64, 1<<40 },
			func(s EngineStatus) bool { return s.Running == maxCount && s.Waiting == maxCount }},
		{"kv usage above one clamped", func(s *EngineStatus) { s.KVUsage = 7 },
			func(s EngineStatus) bool { return s.KVUsage == 1 && s.MetricsOK }},
		{"NaN kv usage makes metrics unknown", func(s *EngineStatus) { s.KVUsage = math.NaN() },
			func(s EngineStatus) bool { return !s.MetricsOK }},
		{"negative occupancy clamped", func(s *EngineStatus) { s.LMCacheOccupancy = -3 },
			func(s EngineStatus) bool { return s.LMCacheOccupancy == 0 && s.LMCacheKnown }},
		{"infinite occupancy unknown", func(s *EngineStatus) { s.LMCacheOccupancy = math.Inf(1) },
			func(s EngineStatus) bool { return !s.LMCacheKnown }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := in
			tc.mod(&m.Status)
			out, err := decodeStatus(encodeStatus(&m)[1:])
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(out.Status) {
				t.Errorf("not clamped: %+v", out.Status)
			}
		})
	}
}

func TestMalformedRejected(t *testing.T) {
	good := encodeResidency(msgResidencyDelta, &residencyMsg{From: "s", Seq: 1, Added: []uint64{5}})[1:]
	tooMany := encodeStatus(&statusMsg{From: "s", Status: EngineStatus{Adapters: make([]string, maxAdapters+1)}})[1:]
	badVersion := protowire.AppendTag(nil, 1, protowire.VarintType)
	badVersion = protowire.AppendVarint(badVersion, 99)
	badVersion = appendString(badVersion, 2, "s")
	longName := appendString(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1), 2, strings.Repeat("x", 300))
	oddFixed := appendString(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1), 2, "s")
	oddFixed = protowire.AppendTag(oddFixed, 8, protowire.BytesType)
	oddFixed = protowire.AppendBytes(oddFixed, []byte{1, 2, 3})
	tests := []struct {
		name   string
		decode func() error
	}{
		{"truncated", func() error { _, err := decodeResidency(good[:len(good)-3], maxKeysPerMsg); return err }},
		{"garbage", func() error { _, err := decodeResidency([]byte{0xff, 0xff, 0xff}, maxKeysPerMsg); return err }},
		{"unknown version", func() error { _, err := decodeResidency(badVersion, maxKeysPerMsg); return err }},
		{"no sender", func() error { _, err := decodeResync(nil); return err }},
		{"sender name too long", func() error { _, err := decodeResync(longName); return err }},
		{"fixed key list not a multiple of 8", func() error { _, err := decodeResidency(oddFixed, maxKeysPerMsg); return err }},
		{"too many adapters", func() error { _, err := decodeStatus(tooMany); return err }},
		{"more keys than the cap", func() error {
			b := encodeResidency(msgResidencyDelta, &residencyMsg{From: "s", Added: randomKeys(rand.New(rand.NewPCG(1, 1)), 100)})
			_, err := decodeResidency(b[1:], 50)
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.decode(); !errors.Is(err, errMalformed) {
				t.Errorf("err = %v, want errMalformed", err)
			}
		})
	}
}

func TestLearnedAndInflightRoundTrip(t *testing.T) {
	in := learnedMsg{From: "router-1", Records: []Learned{
		{Kind: LearnedPrefix, Model: "m", Target: "http://e:1", Key: 77, TTL: time.Minute},
		{Kind: LearnedPin, Model: "m", Target: "http://e:2", Key: 78, TTL: 48 * time.Hour},
	}}
	out, err := decodeLearned(encodeLearned(&in)[1:])
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Records) != 2 || out.Records[0].Key != 77 || out.Records[0].TTL != time.Minute ||
		out.Records[1].TTL != maxLearnedTTL || out.Records[1].From != "router-1" || out.Records[1].Kind != LearnedPin {
		t.Errorf("got %+v", out.Records)
	}
	inf := inflightMsg{From: "router-1", Entries: []inflightEntry{{URL: "http://e:1", N: 3, Prefill: 12000},
		{URL: "http://e:2"}, {URL: "http://e:3", Waiting: [3]uint64{5, 0, 2}}}, ConfigVersion: 12}
	got, err := decodeInflight(encodeInflight(&inf)[1:])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Entries, inf.Entries) || got.ConfigVersion != 12 {
		t.Errorf("got %+v", got)
	}
}

// An intent is an in-flight message without engines: when the sender's
// pick was announced and its rank, a few bytes beyond the header.
func TestIntentRoundTrip(t *testing.T) {
	at := uint64(time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC).UnixNano())
	in := inflightMsg{From: "router-1", Sent: at + 5, Intent: at, Rank: 3, Pending: true}
	b := encodeInflight(&in)
	got, err := decodeInflight(b[1:])
	if err != nil {
		t.Fatal(err)
	}
	if got.Intent != at || got.Rank != 3 || !got.Pending || got.Sent != at+5 || len(got.Entries) != 0 {
		t.Errorf("got %+v, want pending intent %d rank 3", got, at)
	}
	in.Pending = false
	if got, _ := decodeInflight(encodeInflight(&in)[1:]); got.Intent != at || got.Pending {
		t.Errorf("got %+v, want intent %d resolved", got, at)
	}
	none := encodeInflight(&inflightMsg{From: "router-1", Sent: at + 5})
	if extra := len(b) - len(none); extra > 13 {
		t.Errorf("the intent costs %d bytes, want at most 13 (fixed64, rank, pending)", extra)
	}
	if got, _ := decodeInflight(none[1:]); got.Intent != 0 {
		t.Errorf("a message without an intent decoded with intent %d", got.Intent)
	}
	big := encodeInflight(&inflightMsg{From: "router-1", Intent: at, Rank: 1 << 40})
	if got, _ := decodeInflight(big[1:]); got.Rank != maxRank {
		t.Errorf("rank %d, want it clamped to %d", got.Rank, maxRank)
	}
}

func TestMetaUnderLimit(t *testing.T) {
	many := make([]string, 40)
	for i := range many {
		many[i] = strings.Repeat("m", 100) + string(rune('a'+i%26))
	}
	tests := []struct {
		name       string
		meta       Meta
		wantModels int
		wantErr    error
	}{
		{"router", Meta{Role: RoleRouter, NodeID: "router-1", Build: "v1.2.3", ProtoMin: 1, ProtoMax: 1}, 0, nil},
		{"sidecar", Meta{Role: RoleSidecar, NodeID: "s", EngineURL: "http://10.0.0.1:8000", Models: []string{"llama", "qwen"}}, 2, nil},
		{"too many long models are dropped to fit", Meta{Role: RoleSidecar, NodeID: "s", EngineURL: "http://x", Models: many}, 4, nil},
		{"long engine URL refused", Meta{Role: RoleSidecar, EngineURL: "http://" + strings.Repeat("h", 300)}, 0, ErrMetaTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := encodeMeta(&tc.meta)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if len(b) >= MetaLimit {
				t.Fatalf("meta is %d bytes, want < %d", len(b), MetaLimit)
			}
			got, err := decodeMeta(b)
			if err != nil {
				t.Fatal(err)
			}
			if got.Role != tc.meta.Role || got.NodeID != tc.meta.NodeID || len(got.Models) != tc.wantModels || got.Build != tc.meta.Build {
				t.Errorf("got %+v", got)
			}
		})
	}
}

func TestKeySetMatchesMap(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	s := newKeySet(0)
	truth := map[uint64]bool{}
	pool := append(randomKeys(r, 5000), 0, 1)
	for range 200000 {
		k := pool[r.IntN(len(pool))]
		if r.IntN(3) == 0 {
			if s.Remove(k) != truth[k] {
				t.Fatalf("Remove(%d) disagrees", k)
			}
			delete(truth, k)
		} else {
			if s.Add(k) == truth[k] {
				t.Fatalf("Add(%d) disagrees", k)
			}
			truth[k] = true
		}
	}
	if s.Len() != len(truth) {
		t.Fatalf("Len = %d, want %d", s.Len(), len(truth))
	}
	var keys []uint64
	for _, k := range pool {
		if s.Has(k) != truth[k] {
			t.Fatalf("Has(%d) = %v", k, s.Has(k))
		}
		if truth[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if s.Digest() != setDigest(keys) {
		t.Error("incremental digest differs from digest of the contents")
	}
	if per := float64(s.Bytes()) / float64(s.Len()); per > 32 {
		t.Errorf("%.1f bytes per key, want ≤ 32", per)
	}
}

func TestKeySetConcurrentReaders(t *testing.T) {
	s := newKeySet(0)
	stable := randomKeys(rand.New(rand.NewPCG(7, 8)), 1000)
	for _, k := range stable {
		s.Add(k)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	missed := make(chan uint64, 1)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, k := range stable {
					if !s.Has(k) {
						select {
						case missed <- k:
						default:
						}
					}
				}
			}
		}()
	}
	churn := randomKeys(rand.New(rand.NewPCG(9, 10)), 50000) // forces growth and tombstone sweeps
	for i, k := range churn {
		s.Add(k)
		if i >= 100 {
			s.Remove(churn[i-100])
		}
	}
	close(stop)
	wg.Wait()
	select {
	case k := <-missed:
		t.Fatalf("reader missed stable key %d during concurrent writes", k)
	default:
	}
}

func TestResyncRoundTrip(t *testing.T) {
	in := resyncMsg{From: "router-0", Epoch: 9, HaveSeq: 100, Missing: []uint64{101, 103, 200}}
	out, err := decodeResync(encodeResync(&in)[1:])
	if err != nil {
		t.Fatal(err)
	}
	if out.Epoch != 9 || out.HaveSeq != 100 || out.Full || !slices.Equal(out.Missing, in.Missing) {
		t.Errorf("got %+v", out)
	}
	in.Missing = make([]uint64, maxMissing+1)
	for i := range in.Missing {
		in.Missing[i] = 101 + uint64(i)
	}
	if _, err := decodeResync(encodeResync(&in)[1:]); !errors.Is(err, errMalformed) {
		t.Errorf("over-long missing list: err = %v", err)
	}
}
