package engine

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rolter/rolter/kvblock"
	"github.com/rolter/rolter/sim/kvevents"
)

// refModel is a brute-force model of the prefix cache for requests run one
// at a time: linear scans over every physical block.
type refModel struct {
	bs      int
	blocks  []refBlock
	clock   int
	queries uint64
	hits    uint64
}

type refBlock struct {
	key      uint64
	cached   bool
	inUse    bool
	freedAt  int
	cachedAt int
}

func newRef(n, bs int) *refModel {
	r := &refModel{bs: bs, blocks: make([]refBlock, n)}
	for i := range r.blocks {
		r.blocks[i].freedAt = r.clock
		r.clock++
	}
	return r
}

func (r *refModel) find(key uint64) int {
	best := -1
	for i, b := range r.blocks {
		if b.cached && b.key == key && (best < 0 || b.cachedAt < r.blocks[best].cachedAt) {
			best = i
		}
	}
	return best
}

func (r *refModel) run(tokens []uint32, maxTokens int, lora string) {
	keys := kvblock.Keys(nil, tokens, r.bs, kvblock.Extra(lora, ""))
	limit := min((len(tokens)-1)/r.bs, len(keys))
	var mine []int
	for len(mine) < limit {
		i := r.find(keys[len(mine)])
		if i < 0 {
			break
		}
		r.blocks[i].inUse = true
		mine = append(mine, i)
	}
	hits := len(mine)
	r.queries += uint64(len(tokens))
	r.hits += uint64(hits * r.bs)
	total := (len(tokens) + maxTokens - 1 + r.bs - 1) / r.bs
	for len(mine) < total {
		v := -1
		for i, b := range r.blocks {
			if !b.inUse && (v < 0 || b.freedAt < r.blocks[v].freedAt) {
				v = i
			}
		}
		r.blocks[v].inUse, r.blocks[v].cached = true, false
		mine = append(mine, v)
	}
	for i := hits; i < len(keys); i++ {
		b := &r.blocks[mine[i]]
		b.key, b.cached, b.cachedAt = keys[i], true, r.clock
		r.clock++
	}
	for i := len(mine) - 1; i >= 0; i-- {
		r.blocks[mine[i]].inUse = false
		r.blocks[mine[i]].freedAt = r.clock
		r.clock++
	}
}

func (r *refModel) cachedKeys() []uint64 {
	var out []uint64
	for _, b := range r.blocks {
		if b.cached {
			out = append(out, b.key)
		}
	}
	slices.Sort(out)
	return out
}

func engineCachedKeys(e *Engine) []uint64 {
	var out []uint64
	for k, bs := range e.pool.cached {
		for range bs {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// runAlone runs one request to completion on e and returns its completion.
func runAlone(t *testing.T, e *Engine, r Request) (Completion, []StepResult) {
	t.Helper()
	r.Arrival = e.Now()
	if err := e.Submit(r); err != nil {
		t.Fatalf("submit %s: %v", r.ID, err)
	}
	var steps []StepResult
	for i := 0; i < 100000; i++ {
		res, ok := e.Step()
		if !ok {
			break
		}
		steps = append(steps, res)
		for _, c := range res.Completed {
			if c.ID == r.ID {
				return c, steps
			}
		}
	}
	t.Fatalf("request %s did not complete", r.ID)
	return Completion{}, nil
}

func TestPrefixCacheMatchesReferenceModel(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4, 5} {
		t.Run("seed", func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			const bs, nblocks = 16, 48
			e := New(Config{BlockSize: bs, KVBlocks: nblocks, MaxNumBatchedTokens: 64, MaxLoras: 4, Model: DefaultModel})
			ref := newRef(nblocks, bs)
			// A few shared prefixes so requests hit, miss and evict.
			prefixes := make([][]uint32, 6)
			for i := range prefixes {
				prefixes[i] = make([]uint32, 16*(1+rng.IntN(8)))
				for j := range prefixes[i] {
					prefixes[i][j] = uint32(rng.IntN(50))
				}
			}
			loras := []string{"", "", "sql", "chat"}
			for n := 0; n < 300; n++ {
				p := prefixes[rng.IntN(len(prefixes))]
				tail := make([]uint32, rng.IntN(40))
				for j := range tail {
					tail[j] = uint32(rng.IntN(50))
				}
				tokens := append(slices.Clone(p[:1+rng.IntN(len(p))]), tail...)
				maxTok := 1 + rng.IntN(30)
				lora := loras[rng.IntN(len(loras))]
				runAlone(t, e, Request{ID: string(rune('a'+n%26)) + "-" + string(rune(n)), Tokens: tokens, MaxTokens: maxTok, Lora: lora})
				ref.run(tokens, maxTok, lora)
				st := e.Stats()
				if st.PrefixQueries != ref.queries || st.PrefixHits != ref.hits {
					t.Fatalf("request %d: engine queries/hits %d/%d, reference %d/%d", n, st.PrefixQueries, st.PrefixHits, ref.queries, ref.hits)
				}
				if got, want := engineCachedKeys(e), ref.cachedKeys(); !slices.Equal(got, want) {
					t.Fatalf("request %d: cached keys differ:\nengine %v\nref    %v", n, got, want)
				}
			}
			if e.Stats().PrefixHits == 0 {
				t.Fatal("workload produced no hits; test is not exercising the cache")
			}
		})
	}
}

func seqTokens(start, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(start + i)
	}
	return out
}

func TestEvictionOrderIsLeastRecentlyFreedTailFirst(t *testing.T) {
	// 10 blocks: A, B, C take 3 blocks each (2 prompt blocks + 1 for output);
	// re-running A makes B the least recently used.
	e := New(Config{BlockSize: 16, KVBlocks: 10, Instant: true})
	a, b, c, d := seqTokens(1000, 33), seqTokens(2000, 33), seqTokens(3000, 33), seqTokens(4000, 33)
	digests := map[kvevents.Digest]string{}
	record := func(steps []StepResult, name string) {
		for _, s := range steps {
			for _, ev := range s.Events {
				if ev.Kind == kvblock.BlockStored {
					for i, h := range ev.Hashes {
						digests[h] = name + string(rune('0'+i))
					}
				}
			}
		}
	}
	for _, r := range []struct {
		name string
		tok  []uint32
	}{{"A", a}, {"B", b}, {"C", c}, {"A", a}} {
		_, steps := runAlone(t, e, Request{ID: r.name + "x" + string(rune(len(digests))), Tokens: r.tok, MaxTokens: 2})
		record(steps, r.name)
	}
	// D needs 4 blocks: A's uncached output block, B's output block, then
	// B's cached blocks, last first; A (re-used) and C (newer) survive.
	_, steps := runAlone(t, e, Request{ID: "D", Tokens: d, MaxTokens: 32})
	var evicted []string
	for _, s := range steps {
		for _, ev := range s.Events {
			if ev.Kind == kvblock.BlockRemoved {
				evicted = append(evicted, digests[ev.Hashes[0]])
			}
		}
	}
	if want := []string{"B1", "B0"}; !slices.Equal(evicted, want) {
		t.Fatalf("evicted %v, want %v", evicted, want)
	}
}

func TestSecondIdenticalRequestIsFullHit(t *testing.T) {
	tests := []struct {
		name   string
		prompt int
		lora   string
	}{
		{"aligned", 64, ""},
		{"partial last block", 70, ""},
		{"adapter", 70, "sql"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New(Config{Model: DefaultModel})
			tok := seqTokens(7, tt.prompt)
			first, _ := runAlone(t, e, Request{ID: "1", Tokens: tok, MaxTokens: 4, Lora: tt.lora})
			second, _ := runAlone(t, e, Request{ID: "2", Tokens: tok, MaxTokens: 4, Lora: tt.lora})
			want := (tt.prompt - 1) / 16 * 16
			if first.CachedTokens != 0 || second.CachedTokens != want {
				t.Fatalf("cached tokens first %d second %d, want 0 and %d", first.CachedTokens, second.CachedTokens, want)
			}
			if st := e.Stats(); st.PrefixHits != uint64(want) || st.PrefixQueries != uint64(2*tt.prompt) {
				t.Fatalf("counters hits %d queries %d", st.PrefixHits, st.PrefixQueries)
			}
			if second.TTFT() >= first.TTFT() {
				t.Fatalf("hit did not skip prefill: ttft %v then %v", first.TTFT(), second.TTFT())
			}
			// Another adapter (or the base model) does not share the blocks.
			other := "other"
			if tt.lora != "" {
				other = ""
			}
			third, _ := runAlone(t, e, Request{ID: "3", Tokens: tok, MaxTokens: 4, Lora: other})
			if third.CachedTokens != 0 {
				t.Fatalf("blocks shared across adapters: %d cached", third.CachedTokens)
			}
		})
	}
}

func TestSingleRequestMatchesModel(t *testing.T) {
	tests := []struct {
		name                  string
		prompt, output, batch int
	}{
		{"one chunk", 2000, 200, 8192},
		{"chunked prefill", 5000, 50, 1024},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New(Config{MaxNumBatchedTokens: tt.batch})
			c, _ := runAlone(t, e, Request{ID: "r", Tokens: seqTokens(0, tt.prompt), MaxTokens: tt.output})
			ttft, tpot := DefaultModel.SingleRequest(tt.prompt, tt.output, tt.batch)
			if c.TTFT() != ttft {
				t.Fatalf("ttft %v, model %v", c.TTFT(), ttft)
			}
			gotTPOT := (c.Finish - c.FirstToken) / time.Duration(tt.output-1)
			if gotTPOT != tpot {
				t.Fatalf("tpot %v, model %v", gotTPOT, tpot)
			}
			if c.OutputTokens != tt.output {
				t.Fatalf("output %d", c.OutputTokens)
			}
		})
	}
}

func TestQueueGrowsUnderLoad(t *testing.T) {
	e := New(Config{MaxNumSeqs: 8})
	for i := 0; i < 40; i++ {
		if err := e.Submit(Request{ID: string(rune('A' + i)), Tokens: seqTokens(i*1000, 100), MaxTokens: 50}); err != nil {
			t.Fatal(err)
		}
	}
	e.Step()
	if st := e.Stats(); st.Running != 8 || st.Waiting != 32 {
		t.Fatalf("running %d waiting %d, want 8 and 32", st.Running, st.Waiting)
	}
	steps := e.AdvanceTo(time.Hour)
	done := 0
	for _, s := range steps {
		done += len(s.Completed)
	}
	if done != 40 || !e.Idle() {
		t.Fatalf("completed %d, idle %v", done, e.Idle())
	}
}

func TestPreemptionWhenKVRunsOut(t *testing.T) {
	// Two requests whose outputs cannot both fit: one is preempted,
	// recomputed, and both still finish with every token.
	e := New(Config{KVBlocks: 12, Instant: true})
	for _, id := range []string{"a", "b"} {
		if err := e.Submit(Request{ID: id, Tokens: seqTokens(len(id)*500+int(id[0]), 40), MaxTokens: 100}); err != nil {
			t.Fatal(err)
		}
	}
	var comps []Completion
	for _, s := range e.AdvanceTo(time.Hour) {
		comps = append(comps, s.Completed...)
	}
	if len(comps) != 2 {
		t.Fatalf("completed %d", len(comps))
	}
	pre := 0
	for _, c := range comps {
		if c.OutputTokens != 100 {
			t.Fatalf("%s produced %d tokens", c.ID, c.OutputTokens)
		}
		pre += c.Preemptions
	}
	if pre == 0 || e.Stats().Preemptions == 0 {
		t.Fatal("expected a preemption")
	}
}

func TestLoraResidencyLRUAndLoadCost(t *testing.T) {
	e := New(Config{MaxLoras: 2, LoraLoad: 100 * time.Millisecond})
	run := func(id, lora string) Completion {
		c, _ := runAlone(t, e, Request{ID: id, Tokens: seqTokens(5, 20), MaxTokens: 1, Lora: lora})
		return c
	}
	cold := run("1", "a")
	warm := run("2", "a")
	if cold.TTFT()-warm.TTFT() < 90*time.Millisecond {
		t.Fatalf("cold %v warm %v: load cost missing", cold.TTFT(), warm.TTFT())
	}
	run("3", "b")
	run("4", "a") // a is now more recent than b
	run("5", "c") // evicts b
	if got := e.Stats().ResidentLoras; !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("resident %v", got)
	}
}

func TestAdvanceToHonoursArrivals(t *testing.T) {
	e := New(Config{})
	if err := e.Submit(Request{ID: "late", Tokens: seqTokens(0, 100), MaxTokens: 2, Arrival: time.Second}); err != nil {
		t.Fatal(err)
	}
	if steps := e.AdvanceTo(500 * time.Millisecond); len(steps) != 0 {
		t.Fatalf("ran %d steps before arrival", len(steps))
	}
	var c []Completion
	for _, s := range e.AdvanceTo(2 * time.Second) {
		c = append(c, s.Completed...)
	}
	ttft, _ := DefaultModel.SingleRequest(100, 2, 8192)
	if len(c) != 1 || c[0].FirstToken != time.Second+ttft {
		t.Fatalf("completions %+v", c)
	}
}

func TestPreemptedRelookupsCountedApart(t *testing.T) {
	e := New(Config{KVBlocks: 12, Instant: true})
	for _, id := range []string{"a", "b"} {
		if err := e.Submit(Request{ID: id, Tokens: seqTokens(int(id[0])*1000, 40), MaxTokens: 100}); err != nil {
			t.Fatal(err)
		}
	}
	e.AdvanceTo(time.Hour)
	st := e.Stats()
	if st.Preemptions == 0 || st.PreemptedQueries == 0 {
		t.Fatalf("no preempted lookups: %+v", st)
	}
	if st.PrefixQueries != 80 {
		t.Fatalf("queries %d, want the two prompts' 80 tokens", st.PrefixQueries)
	}
}

// A request submitted after another but stamped as arriving earlier
// queues ahead of it (first come, first served by arrival), and an engine
// whose only request has not arrived yet says when to advance to.
func TestWaitingQueueFollowsArrival(t *testing.T) {
	e := New(Config{MaxNumSeqs: 1})
	if err := e.Submit(Request{ID: "later", Tokens: seqTokens(0, 64), MaxTokens: 1, Arrival: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if at, ok := e.NextArrival(); !ok || at != 20*time.Millisecond {
		t.Fatalf("NextArrival = %v, %v; want 20ms, true", at, ok)
	}
	if err := e.Submit(Request{ID: "earlier", Tokens: seqTokens(1000, 64), MaxTokens: 1, Arrival: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if at, ok := e.NextArrival(); !ok || at != 10*time.Millisecond {
		t.Fatalf("NextArrival = %v, %v after an earlier arrival; want 10ms, true", at, ok)
	}
	var order []string
	for _, s := range e.AdvanceTo(time.Second) {
		for _, c := range s.Completed {
			order = append(order, c.ID)
		}
	}
	if !slices.Equal(order, []string{"earlier", "later"}) {
		t.Fatalf("served %v; want earlier first, one at a time", order)
	}
	if _, ok := e.NextArrival(); ok {
		t.Fatal("NextArrival on an idle engine")
	}
}
