package admission

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testConfig() Config {
	c := DefaultConfig()
	c.Quantum = 1
	return c
}

// drain pops everything at now and returns "band/flow/n" labels.
func drain(q *Queue, now time.Time) []string {
	var out []string
	for w := q.Next(now); w != nil; w = q.Next(now) {
		out = append(out, w.Value.(string))
	}
	return out
}

func push(t *testing.T, q *Queue, b Band, flow string, at time.Time, label string) *Waiter {
	t.Helper()
	w := &Waiter{Band: b, Flow: flow, Value: label}
	if err := q.Push(w, at); err != nil {
		t.Fatalf("push %s: %v", label, err)
	}
	return w
}

func TestHigherBandsLeaveFirst(t *testing.T) {
	q := NewQueue(testConfig())
	push(t, q, Sheddable, "k", t0, "s1")
	push(t, q, Standard, "k", t0.Add(time.Millisecond), "n1")
	push(t, q, Critical, "k", t0.Add(2*time.Millisecond), "c1")
	push(t, q, Sheddable, "k", t0.Add(3*time.Millisecond), "s2")
	push(t, q, Critical, "k", t0.Add(4*time.Millisecond), "c2")
	got := strings.Join(drain(q, t0.Add(time.Second)), " ")
	if want := "c1 c2 n1 s1 s2"; got != want {
		t.Fatalf("order %q, want %q", got, want)
	}
}

func TestFullBandRejects(t *testing.T) {
	c := testConfig()
	c.Bands[Sheddable].MaxQueue = 2
	q := NewQueue(c)
	push(t, q, Sheddable, "k", t0, "s1")
	push(t, q, Sheddable, "k", t0, "s2")
	if err := q.Push(&Waiter{Band: Sheddable}, t0); !errors.Is(err, ErrFull) {
		t.Fatalf("third sheddable: %v, want ErrFull", err)
	}
	// Another band has its own bound.
	push(t, q, Critical, "k", t0, "c1")
	if q.Len(Sheddable) != 2 || q.Total() != 3 {
		t.Fatalf("len sheddable %d total %d", q.Len(Sheddable), q.Total())
	}
}

func TestExpireByBandTTL(t *testing.T) {
	c := testConfig()
	c.Bands[Sheddable].TTL = time.Second
	c.Bands[Standard].TTL = 3 * time.Second
	q := NewQueue(c)
	push(t, q, Sheddable, "k", t0, "s1")
	push(t, q, Standard, "k", t0, "n1")
	push(t, q, Sheddable, "k", t0.Add(500*time.Millisecond), "s2")
	if at, ok := q.NextExpiry(); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("next expiry %v %v, want t0+1s", at, ok)
	}
	var gone []string
	q.Expire(t0.Add(time.Second), func(w *Waiter) { gone = append(gone, w.Value.(string)) })
	if fmt.Sprint(gone) != "[s1]" {
		t.Fatalf("expired at 1s: %v", gone)
	}
	q.Expire(t0.Add(3*time.Second), func(w *Waiter) { gone = append(gone, w.Value.(string)) })
	if fmt.Sprint(gone) != "[s1 s2 n1]" {
		t.Fatalf("expired at 3s: %v", gone)
	}
	if q.Total() != 0 {
		t.Fatalf("left %d", q.Total())
	}
}

func TestPromotionAfterWait(t *testing.T) {
	c := testConfig()
	c.PromoteAfter = 2 * time.Second
	c.PromoteEvery = 1
	q := NewQueue(c)
	push(t, q, Sheddable, "k", t0, "s1")
	push(t, q, Standard, "k", t0, "n1")
	push(t, q, Critical, "k", t0, "c1")
	push(t, q, Critical, "k", t0, "c2")
	// After 2 s the standard waiter is one step below critical: promoted.
	// The sheddable one needs 4 s (two steps) and waits.
	if w := q.Next(t0.Add(2 * time.Second)); w.Value != "n1" {
		t.Fatalf("at 2s got %v, want the promoted n1", w.Value)
	}
	if w := q.Next(t0.Add(2 * time.Second)); w.Value != "c1" {
		t.Fatalf("then %v, want c1", w.Value)
	}
	if w := q.Next(t0.Add(4 * time.Second)); w.Value != "s1" {
		t.Fatalf("at 4s got %v, want the promoted s1", w.Value)
	}
	if w := q.Next(t0.Add(4 * time.Second)); w.Value != "c2" {
		t.Fatalf("then %v, want c2", w.Value)
	}
}

// Promotion takes at most one release in PromoteEvery: long-waiting
// sheddable requests cannot take over a busy critical band.
func TestPromotionIsBounded(t *testing.T) {
	c := testConfig()
	c.PromoteAfter = time.Second
	c.PromoteEvery = 3
	q := NewQueue(c)
	for i := range 4 {
		push(t, q, Sheddable, "k", t0, fmt.Sprintf("s%d", i))
	}
	for i := range 6 {
		push(t, q, Critical, "k", t0, fmt.Sprintf("c%d", i))
	}
	got := strings.Join(drain(q, t0.Add(time.Minute)), " ")
	if want := "c0 c1 s0 c2 c3 s1 c4 c5 s2 s3"; got != want {
		t.Fatalf("order %q, want %q", got, want)
	}
}

func TestFairnessAcrossFlows(t *testing.T) {
	q := NewQueue(testConfig())
	// One key bursts ten requests before another sends two.
	for i := range 10 {
		push(t, q, Standard, "burst", t0, fmt.Sprintf("b%d", i))
	}
	push(t, q, Standard, "quiet", t0.Add(time.Millisecond), "q0")
	push(t, q, Standard, "quiet", t0.Add(time.Millisecond), "q1")
	got := drain(q, t0.Add(time.Second))
	if strings.Join(got[:4], " ") != "b0 q0 b1 q1" {
		t.Fatalf("first four %v: the quiet key should alternate with the burst", got[:4])
	}
	if len(got) != 12 {
		t.Fatalf("released %d of 12", len(got))
	}
}

func TestFairnessWeighsCost(t *testing.T) {
	c := testConfig()
	c.Quantum = 1000
	q := NewQueue(c)
	// Key "long" sends 4000-token prompts, key "short" 500-token ones:
	// per round a flow gets 1000 tokens of credit.
	for i := range 3 {
		q.Push(&Waiter{Band: Standard, Flow: "long", Cost: 4000, Value: fmt.Sprintf("L%d", i)}, t0)
	}
	for i := range 8 {
		q.Push(&Waiter{Band: Standard, Flow: "short", Cost: 500, Value: fmt.Sprintf("S%d", i)}, t0)
	}
	got := drain(q, t0)
	// long needs four rounds of credit for its first request; short sends
	// two per round meanwhile.
	idx := map[string]int{}
	for i, v := range got {
		idx[v] = i
	}
	if idx["L0"] < idx["S5"] {
		t.Fatalf("order %v: the first long prompt should wait for ~4000 tokens of short ones", got)
	}
	if len(got) != 11 {
		t.Fatalf("released %d of 11", len(got))
	}
}

func TestRemoveLeavesAtOnce(t *testing.T) {
	q := NewQueue(testConfig())
	a := push(t, q, Standard, "k", t0, "a")
	push(t, q, Standard, "k", t0, "b")
	if !q.Remove(a) || a.Queued() {
		t.Fatal("remove of a queued waiter failed")
	}
	if q.Remove(a) {
		t.Fatal("second remove reported success")
	}
	if got := drain(q, t0); fmt.Sprint(got) != "[b]" {
		t.Fatalf("left %v", got)
	}
}

func TestHeadroom(t *testing.T) {
	th := Thresholds{MaxLoad: 10, MaxWaiting: 4, MaxKVUsage: 0.9}
	cases := []struct {
		name string
		e    Engine
		want int
	}{
		{"idle", Engine{}, 10},
		{"load bound", Engine{Load: 7}, 3},
		{"waiting bound", Engine{Load: 2, Waiting: 3, WaitingOK: true}, 1},
		{"waiting unknown is ignored", Engine{Load: 2, Waiting: 30}, 8},
		{"load full", Engine{Load: 12}, 0},
		{"kv full", Engine{KVUsage: 0.95, KVOK: true}, 0},
		{"kv unknown", Engine{KVUsage: 0.95}, 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := th.Headroom(c.e); got != c.want {
				t.Fatalf("headroom %d, want %d", got, c.want)
			}
			if th.Saturated(c.e) != (c.want == 0) {
				t.Fatalf("saturated %v with headroom %d", th.Saturated(c.e), c.want)
			}
		})
	}
	// A queued-prefill threshold admits one per look below it, none at it.
	pf := th
	pf.MaxQueuedPrefill = 8000
	if got := pf.Headroom(Engine{Load: 2, QueuedPrefill: 7000}); got != 1 {
		t.Fatalf("below the prefill threshold: headroom %d, want 1", got)
	}
	if got := pf.Headroom(Engine{QueuedPrefill: 8000}); got != 0 {
		t.Fatalf("at the prefill threshold: headroom %d, want 0", got)
	}
	// Without a count threshold an unsaturated engine takes one per update.
	if got := (Thresholds{MaxKVUsage: 0.9}).Headroom(Engine{KVUsage: 0.5, KVOK: true}); got != 1 {
		t.Fatalf("kv-only headroom %d, want 1", got)
	}
	if u := th.Utilization(Engine{Load: 5, Waiting: 4, WaitingOK: true}); u != 1 {
		t.Fatalf("utilization %v, want 1 (waiting at its threshold)", u)
	}
}

func TestShare(t *testing.T) {
	cases := []struct{ headroom, own, peers, want int }{
		{0, 5, 0, 0},
		{4, 0, 3, 0},
		{4, 10, 0, 4},  // alone: the whole headroom
		{4, 2, 0, 2},   // never more than own
		{6, 10, 20, 2}, // a third of the queued work: a third of the room
		{1, 10, 20, 1}, // at least one
		{9, 10, 10, 5}, // rounded up
	}
	for _, c := range cases {
		if got := Share(c.headroom, c.own, c.peers); got != c.want {
			t.Errorf("Share(%d, %d, %d) = %d, want %d", c.headroom, c.own, c.peers, got, c.want)
		}
	}
}

func TestParseBandAndCap(t *testing.T) {
	if b, ok := ParseBand(" Critical "); !ok || b != Critical {
		t.Fatalf("ParseBand critical: %v %v", b, ok)
	}
	if b, ok := ParseBand("urgent"); ok || b != Standard {
		t.Fatalf("ParseBand urgent: %v %v, want standard, false", b, ok)
	}
	if Critical.Cap(Standard) != Standard || Sheddable.Cap(Critical) != Sheddable {
		t.Fatal("Cap does not lower to the key's maximum")
	}
}

// Each band sees the thresholds scaled by its fill: lower bands stop
// short of the threshold, leaving the engine room for the bands above.
func TestBandFills(t *testing.T) {
	c := DefaultConfig()
	c.Thresholds = Thresholds{MaxLoad: 8, MaxQueuedPrefill: 1000, MaxKVUsage: 0.9}
	if got := c.For(Sheddable); got.MaxLoad != 4 || got.MaxQueuedPrefill != 500 || got.MaxKVUsage != 0.9 {
		t.Fatalf("sheddable thresholds %+v, want load 4, prefill 500, KV kept at 0.9", got)
	}
	cases := []struct {
		e                        Engine
		critical, standard, shed bool
	}{
		{Engine{Load: 3}, true, true, true},
		{Engine{Load: 4}, true, true, false},
		{Engine{Load: 6}, true, false, false},
		{Engine{Load: 8}, false, false, false},
		{Engine{QueuedPrefill: 600}, true, true, false},
		{Engine{KVUsage: 0.8, KVOK: true}, true, true, true},
	}
	for _, k := range cases {
		if c.Room(Critical, k.e) != k.critical || c.Room(Standard, k.e) != k.standard || c.Room(Sheddable, k.e) != k.shed {
			t.Errorf("%+v: room critical %v standard %v sheddable %v, want %v %v %v", k.e,
				c.Room(Critical, k.e), c.Room(Standard, k.e), c.Room(Sheddable, k.e), k.critical, k.standard, k.shed)
		}
	}
	// A tiny threshold scaled down still admits to an idle engine.
	c.Thresholds = Thresholds{MaxLoad: 1}
	if !c.Room(Sheddable, Engine{}) || c.Room(Sheddable, Engine{Load: 1}) {
		t.Fatal("a threshold of 1 at fill 0.5 should admit one request and no more")
	}
}

// probe is a Probe with the given headroom per band (critical, standard,
// sheddable).
func probe(critical, standard, sheddable int) Probe {
	var p Probe
	p.Headroom[Critical], p.Headroom[Standard], p.Headroom[Sheddable] = critical, standard, sheddable
	return p
}

// A request passes at once when nothing of its band or above waits and
// the pool has room for its band: a critical arrival passes waiting
// sheddable ones.
func TestAdmitsNow(t *testing.T) {
	q := NewQueue(testConfig())
	if !q.AdmitsNow(Sheddable, probe(2, 1, 1), 0) {
		t.Fatal("empty queue with room: not admitted")
	}
	if q.AdmitsNow(Sheddable, probe(2, 1, 1), 1) {
		t.Fatal("the room was taken by a recent admission: admitted anyway")
	}
	push(t, q, Sheddable, "k", t0, "s1")
	if q.AdmitsNow(Sheddable, probe(2, 1, 1), 0) {
		t.Fatal("a sheddable arrival passed a waiting sheddable one")
	}
	if !q.AdmitsNow(Critical, probe(2, 0, 0), 0) {
		t.Fatal("a critical arrival with room for critical waited behind sheddable waiters")
	}
	if q.AdmitsNow(Standard, probe(2, 0, 0), 0) {
		t.Fatal("a standard arrival admitted without room for standard")
	}
	push(t, q, Critical, "k", t0, "c1")
	if q.AdmitsNow(Critical, probe(2, 2, 2), 0) {
		t.Fatal("a critical arrival passed a waiting critical one")
	}
}

// Release takes from the highest band with room, never past a band's
// room, and tells the band each waiter leaves under.
func TestReleaseKeepsToEachBandsRoom(t *testing.T) {
	q := NewQueue(testConfig())
	for i := range 3 {
		push(t, q, Sheddable, "k", t0, fmt.Sprintf("s%d", i))
	}
	push(t, q, Critical, "k", t0, "c0")
	push(t, q, Critical, "k", t0, "c1")
	var got []string
	n := q.Release(t0, probe(3, 1, 0), 0, func(w *Waiter, as Band) { got = append(got, w.Value.(string)+"/"+as.String()) })
	if want := "c0/critical c1/critical"; n != 2 || strings.Join(got, " ") != want {
		t.Fatalf("released %d: %v, want %s (no room for sheddable)", n, got, want)
	}
	got = nil
	q.Release(t0, probe(3, 3, 2), 1, func(w *Waiter, as Band) { got = append(got, w.Value.(string)) })
	if want := "s0"; strings.Join(got, " ") != want {
		t.Fatalf("released %v, want %s: sheddable room 2 less 1 recent", got, want)
	}
}

// A router releases its share of the room for a band against the other
// routers' waiters of that band and above: its sheddable work yields to
// critical work waiting elsewhere, while its critical work does not yield
// to sheddable work elsewhere.
func TestReleaseYieldsToHigherBandsOnOtherRouters(t *testing.T) {
	shed := NewQueue(testConfig())
	crit := NewQueue(testConfig())
	for i := range 4 {
		push(t, shed, Sheddable, "k", t0, fmt.Sprintf("s%d", i))
		push(t, crit, Critical, "k", t0, fmt.Sprintf("c%d", i))
	}
	p := probe(4, 4, 4)
	p.Peers[Critical] = 12
	if n := shed.Release(t0, p, 0, func(*Waiter, Band) {}); n != 1 {
		t.Fatalf("sheddable released %d with 12 critical waiting elsewhere, want 1 (4 × 4/16)", n)
	}
	p = probe(4, 4, 4)
	p.Peers[Sheddable] = 12
	if n := crit.Release(t0, p, 0, func(*Waiter, Band) {}); n != 4 {
		t.Fatalf("critical released %d with 12 sheddable waiting elsewhere, want all 4", n)
	}
}

// The band's bound holds for the pool across routers: the other routers'
// waiters of the band count against MaxQueue.
func TestPushAmongCountsOtherRoutersWaiters(t *testing.T) {
	c := testConfig()
	c.Bands[Standard].MaxQueue = 3
	q := NewQueue(c)
	var p Probe
	p.Peers[Standard], p.Peers[Critical] = 2, 50
	if err := q.PushAmong(&Waiter{Band: Standard}, t0, p); err != nil {
		t.Fatalf("first standard with 2 waiting elsewhere: %v", err)
	}
	if err := q.PushAmong(&Waiter{Band: Standard}, t0, p); !errors.Is(err, ErrFull) {
		t.Fatalf("second standard with 2 waiting elsewhere and 1 here: %v, want ErrFull", err)
	}
	if err := q.PushAmong(&Waiter{Band: Sheddable}, t0, p); err != nil {
		t.Fatalf("other bands' waiters elsewhere do not count: %v", err)
	}
}

// A router scales its own counts on an engine by its peers' share of the
// queued work, since their counts reach it late: alone, or with no peer
// waiting, nothing changes.
func TestSpreadAndEstimate(t *testing.T) {
	cases := []struct {
		own, peers, routers int
		want                float64
	}{
		{5, 0, 8, 1},
		{5, 10, 1, 1},
		{5, 10, 8, 3},
		{0, 10, 3, 3},  // capped at the router count
		{1, 100, 8, 8}, // likewise
	}
	for _, c := range cases {
		if got := Spread(c.own, c.peers, c.routers); got != c.want {
			t.Errorf("Spread(%d, %d, %d) = %v, want %v", c.own, c.peers, c.routers, got, c.want)
		}
	}
	if got := Estimate(300, 200, 1); got != 500 {
		t.Errorf("Estimate without spread: %d, want own + peers", got)
	}
	if got := Estimate(300, 200, 3); got != 900 {
		t.Errorf("Estimate with spread 3: %d, want 900", got)
	}
	if got := Estimate(100, 800, 3); got != 900 {
		t.Errorf("Estimate when peers report more: %d, want own + peers", got)
	}
}
