package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rolter/rolter/kvblock"
	"github.com/rolter/rolter/sim/kvevents"
)

// Config sizes an engine. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// BlockSize is the KV block size in tokens (vLLM: 16).
	BlockSize int
	// KVBlocks is the GPU KV cache capacity in blocks.
	KVBlocks int
	// MaxNumSeqs caps the sequences in one batch.
	MaxNumSeqs int
	// MaxNumBatchedTokens caps the tokens computed in one step; longer
	// prompts are prefilled in chunks (chunked prefill).
	MaxNumBatchedTokens int
	// MaxLoras caps the adapters resident at once (and in one batch).
	MaxLoras int
	// LoraLoad is added to a step that loads a cold adapter.
	LoraLoad time.Duration
	// Model gives each step's duration; the zero model means DefaultModel
	// unless Instant is set.
	Model StepModel
	// Instant makes every step, and adapter loads, take no time
	// (router-overhead benchmarks).
	Instant bool
	// CPUTierBlocks, when positive, enables a simulated LMCache CPU tier of
	// that many blocks.
	CPUTierBlocks int
	// MaxModelLen caps prompt + output tokens of one request.
	MaxModelLen int
}

// DefaultConfig is vLLM v1's online-serving defaults for Llama-3.1-8B on
// one H100-80GB (≈450k tokens of KV cache at gpu_memory_utilization 0.9).
var DefaultConfig = Config{
	BlockSize:           kvblock.DefaultBlockSize,
	KVBlocks:            28000,
	MaxNumSeqs:          256,
	MaxNumBatchedTokens: 8192,
	MaxLoras:            4,
	LoraLoad:            25 * time.Millisecond,
	Model:               DefaultModel,
	MaxModelLen:         131072,
}

func (c Config) withDefaults() Config {
	d := DefaultConfig
	if c.BlockSize <= 0 {
		c.BlockSize = d.BlockSize
	}
	if c.KVBlocks <= 0 {
		c.KVBlocks = d.KVBlocks
	}
	if c.MaxNumSeqs <= 0 {
		c.MaxNumSeqs = d.MaxNumSeqs
	}
	if c.MaxNumBatchedTokens <= 0 {
		c.MaxNumBatchedTokens = d.MaxNumBatchedTokens
	}
	if c.MaxLoras <= 0 {
		c.MaxLoras = d.MaxLoras
	}
	if c.Instant {
		c.Model, c.LoraLoad = Instant, 0
	} else if c.Model == (StepModel{}) {
		c.Model = d.Model
	}
	if c.MaxModelLen <= 0 {
		c.MaxModelLen = d.MaxModelLen
	}
	return c
}

// Errors returned by Submit.
var (
	ErrTooLong   = errors.New("engine: request does not fit the model length or the KV cache")
	ErrDuplicate = errors.New("engine: duplicate request id")
	ErrEmpty     = errors.New("engine: empty prompt")
)

// Request is one generation request. Time values are virtual: offsets
// from the engine's zero time, as the caller's clock defines them.
type Request struct {
	ID        string
	Tokens    []uint32
	MaxTokens int
	Lora      string
	// Arrival is when the request reaches the engine; no step starting
	// earlier admits it.
	Arrival time.Duration
}

// Output reports one request's progress in a step: a token was produced
// (First marks the first one) and Done marks the last.
type Output struct {
	ID    string
	First bool
	Done  bool
}

// Completion is a finished request's account.
type Completion struct {
	ID           string
	Lora         string
	Arrival      time.Duration
	Scheduled    time.Duration // first step that computed it
	FirstToken   time.Duration
	Finish       time.Duration
	PromptTokens int
	CachedTokens int // prompt tokens found in the GPU prefix cache
	LoadedTokens int // prompt tokens loaded from the CPU tier
	OutputTokens int
	Preemptions  int
}

// TTFT is the time from arrival to the first token.
func (c Completion) TTFT() time.Duration { return c.FirstToken - c.Arrival }

// Latency is the time from arrival to the last token.
func (c Completion) Latency() time.Duration { return c.Finish - c.Arrival }

// StepResult is what one scheduler step did.
type StepResult struct {
	Start, End    time.Duration
	PrefillTokens int
	DecodeSeqs    int
	LoadedTokens  int
	LoraLoads     int
	Outputs       []Output
	Completed     []Completion
	// Events are the KV events of the step (stores, evictions), in order.
	Events []kvevents.Event
}

// Stats is a snapshot of the engine's gauges and counters.
type Stats struct {
	Now           time.Duration
	Running       int
	Waiting       int
	UsedBlocks    int
	TotalBlocks   int
	PrefixQueries uint64 // prompt tokens looked up by new requests
	PrefixHits    uint64 // of which found in the prefix cache
	// PreemptedQueries and PreemptedHits count the re-lookups of preempted
	// requests, apart (as vLLM does; not exported as metrics).
	PreemptedQueries uint64
	PreemptedHits    uint64
	CPUUsedBlocks    int
	CPUTotalBlocks   int
	CPUHitTokens     uint64
	Preemptions      uint64
	LoraLoads        uint64
	ResidentLoras    []string
	RunningLoras     []string
	WaitingLoras     []string
	CompletedTotal   uint64
	GeneratedTokens  uint64
	PromptTokens     uint64
}

type seq struct {
	req          Request
	extra        uint64
	keys         []uint64
	blocks       []*block
	cachedBlocks int // leading blocks registered in the cache
	computed     int
	out          int
	scheduled    bool
	firstSet     bool
	c            Completion
	numNew       int // tokens scheduled in the current step
}

func (s *seq) all() int { return len(s.req.Tokens) + s.out }

// Engine is the vLLM engine model: a continuous-batching scheduler with
// chunked prefill over a paged prefix cache, LoRA residency and an
// optional CPU tier, driven in virtual time. Nothing sleeps: a caller
// steps it (Step) or advances it to a time (AdvanceTo) and reads what
// happened. An Engine is not safe for concurrent use; the real-time driver
// and the fleet simulator serialize calls.
type Engine struct {
	cfg     Config
	pool    *pool
	loras   *loras
	cpu     *cpuTier
	model   StepModel
	now     time.Duration
	waiting []*seq
	running []*seq
	byID    map[string]*seq

	queries, hits, preemptions   uint64
	preQueries, preHits          uint64
	completed, generated, prompt uint64
}

// New returns an idle engine at virtual time 0.
func New(cfg Config) *Engine {
	cfg = cfg.withDefaults()
	e := &Engine{
		cfg:   cfg,
		pool:  newPool(cfg.KVBlocks),
		loras: newLoras(cfg.MaxLoras),
		model: cfg.Model,
		byID:  make(map[string]*seq),
	}
	if cfg.CPUTierBlocks > 0 {
		e.cpu = newCPUTier(cfg.CPUTierBlocks)
	}
	return e
}

// Config returns the engine's configuration with defaults applied.
func (e *Engine) Config() Config { return e.cfg }

// Now is the engine's virtual time: the end of its last step, or the time
// it was last advanced to.
func (e *Engine) Now() time.Duration { return e.now }

// SetModel replaces the step model (a slowdown fault scales it).
func (e *Engine) SetModel(m StepModel) { e.model = m }

// NextArrival is the arrival of the first waiting request when no step
// could run now because it has not arrived yet (ok false otherwise): the
// time to advance an otherwise idle engine to.
func (e *Engine) NextArrival() (at time.Duration, ok bool) {
	if len(e.running) > 0 || len(e.waiting) == 0 || e.waiting[0].req.Arrival <= e.now {
		return 0, false
	}
	return e.waiting[0].req.Arrival, true
}

// Idle reports whether the engine has no request at all.
func (e *Engine) Idle() bool { return len(e.running) == 0 && len(e.waiting) == 0 }

// Submit queues r. Its prompt's block keys are computed here, keyed by
// its adapter.
func (e *Engine) Submit(r Request) error {
	if len(r.Tokens) == 0 {
		return ErrEmpty
	}
	if _, dup := e.byID[r.ID]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicate, r.ID)
	}
	r.MaxTokens = max(r.MaxTokens, 1)
	total := len(r.Tokens) + r.MaxTokens
	if total > e.cfg.MaxModelLen || (total+e.cfg.BlockSize-1)/e.cfg.BlockSize > e.cfg.KVBlocks {
		return fmt.Errorf("%w: %d tokens", ErrTooLong, total)
	}
	s := &seq{req: r, extra: kvblock.Extra(r.Lora, "")}
	s.keys = kvblock.Keys(make([]uint64, 0, len(r.Tokens)/e.cfg.BlockSize), r.Tokens, e.cfg.BlockSize, s.extra)
	s.c = Completion{ID: r.ID, Lora: r.Lora, Arrival: r.Arrival, PromptTokens: len(r.Tokens)}
	// First come, first served by arrival: a request submitted after
	// another but stamped earlier (see rolter sim --client-clock) queues
	// ahead of it. Arrivals stamped in submission order append.
	k := len(e.waiting)
	for k > 0 && e.waiting[k-1].req.Arrival > r.Arrival {
		k--
	}
	e.waiting = slices.Insert(e.waiting, k, s)
	e.byID[r.ID] = s
	e.prompt += uint64(len(r.Tokens))
	return nil
}

// Abort drops a request wherever it is, freeing its blocks.
func (e *Engine) Abort(id string) bool {
	s, ok := e.byID[id]
	if !ok {
		return false
	}
	delete(e.byID, id)
	e.pool.free(s.blocks)
	s.blocks = nil
	e.waiting = remove(e.waiting, s)
	e.running = remove(e.running, s)
	return true
}

func remove(list []*seq, s *seq) []*seq {
	for i, x := range list {
		if x == s {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}

// runnable reports whether a step starting now has work.
func (e *Engine) runnable() bool {
	return len(e.running) > 0 || (len(e.waiting) > 0 && e.waiting[0].req.Arrival <= e.now)
}

// AdvanceTo runs every step that starts before t (a step may end after t)
// and moves an idle engine's clock to t. It returns the steps run.
func (e *Engine) AdvanceTo(t time.Duration) []StepResult {
	var out []StepResult
	for e.now < t {
		if e.runnable() {
			r, ok := e.Step()
			if ok {
				out = append(out, r)
				continue
			}
		}
		if len(e.waiting) > 0 && e.waiting[0].req.Arrival > e.now && e.waiting[0].req.Arrival < t {
			e.now = e.waiting[0].req.Arrival
			continue
		}
		e.now = t
	}
	return out
}

// Step runs one scheduler step at Now: it schedules running sequences
// (decodes and unfinished prefill chunks) and admits waiting ones within
// the token budget, charges the step's modelled duration, and returns what
// the step produced. ok is false, and time does not move, when there is
// nothing to run.
func (e *Engine) Step() (res StepResult, ok bool) {
	bs := e.cfg.BlockSize
	budget := e.cfg.MaxNumBatchedTokens
	res.Start = e.now
	var batch []*seq
	busy := make(map[string]int)
	for _, s := range e.running {
		if s.req.Lora != "" {
			busy[s.req.Lora]++
		}
	}
	preempted := false
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		n := min(s.all()-s.computed, budget)
		need := (s.computed+n+bs-1)/bs - len(s.blocks)
		for need > 0 {
			if got := e.pool.allocate(need); got != nil {
				s.blocks = append(s.blocks, got...)
				break
			}
			victim := e.running[len(e.running)-1]
			e.preempt(victim, busy)
			preempted = true
			if victim == s {
				n = 0
				break
			}
		}
		if n == 0 { // s preempted itself: it was the last running
			break
		}
		s.numNew = n
		budget -= n
		batch = append(batch, s)
	}
	if !preempted {
		kept := e.waiting[:0]
		for i, s := range e.waiting {
			if s.req.Arrival > e.now || budget <= 0 || len(e.running) >= e.cfg.MaxNumSeqs {
				kept = append(kept, e.waiting[i:]...)
				break
			}
			admitted, blocked := e.admit(s, budget, busy, &res)
			if !admitted {
				kept = append(kept, s)
				if blocked {
					kept = append(kept, e.waiting[i+1:]...)
					break
				}
				continue
			}
			budget -= s.numNew
			e.running = append(e.running, s)
			batch = append(batch, s)
		}
		e.waiting = kept
	}
	if len(batch) == 0 {
		res.Events = e.pool.takeEvents()
		return res, false
	}
	context := 0
	for _, s := range batch {
		if s.computed >= len(s.req.Tokens) && s.numNew == 1 {
			res.DecodeSeqs++
		} else {
			res.PrefillTokens += s.numNew
		}
		context += s.computed + s.numNew
	}
	dur := e.model.Step(res.PrefillTokens, res.DecodeSeqs, context, res.LoadedTokens)
	dur += time.Duration(res.LoraLoads) * e.cfg.LoraLoad
	e.now += dur
	res.End = e.now
	for _, s := range batch {
		e.finishStep(s, &res)
	}
	res.Events = append(res.Events, e.pool.takeEvents()...)
	return res, true
}

// admit tries to start waiting sequence s. blocked means the queue must
// stop (no KV room); false admitted without blocked means s is skipped
// (its adapter cannot join this batch).
func (e *Engine) admit(s *seq, budget int, busy map[string]int, res *StepResult) (admitted, blocked bool) {
	bs := e.cfg.BlockSize
	if l := s.req.Lora; l != "" && busy[l] == 0 && len(busy) >= e.cfg.MaxLoras {
		return false, false
	}
	all := s.all()
	limit := min((all-1)/bs, len(s.keys))
	hits, inFree := e.pool.hitBlocks(s.keys, limit)
	loaded := 0
	if e.cpu != nil {
		loaded = e.cpu.prefix(s.keys[hits:], limit-hits)
	}
	start := (hits + loaded) * bs
	n := min(all-start, budget)
	need := (start+n+bs-1)/bs - hits
	if need > e.pool.nfree-inFree {
		return false, true
	}
	if l := s.req.Lora; l != "" {
		loadedNow, ok := e.loras.ensure(l, busy)
		if !ok {
			return false, false
		}
		if loadedNow {
			res.LoraLoads++
		}
		busy[l]++
	}
	for _, k := range s.keys[:hits] {
		b := e.pool.lookup(k)
		e.pool.touch(b)
		s.blocks = append(s.blocks, b)
	}
	s.cachedBlocks = hits
	s.blocks = append(s.blocks, e.pool.allocate(need)...)
	s.computed = start
	s.numNew = n
	if s.c.Preemptions > 0 {
		// vLLM counts a preempted request's re-lookup apart, so a victim
		// re-hitting its own blocks does not inflate the hit rate.
		e.preQueries += uint64(all)
		e.preHits += uint64(hits * bs)
	} else {
		e.queries += uint64(all)
		e.hits += uint64(hits * bs)
	}
	if !s.scheduled {
		s.scheduled = true
		s.c.Scheduled = e.now
		s.c.CachedTokens = hits * bs
		s.c.LoadedTokens = loaded * bs
	}
	if loaded > 0 {
		e.cpu.hits += uint64(loaded * bs)
		res.LoadedTokens += loaded * bs
	}
	return true, false
}

// preempt returns a running sequence to the head of the queue, freeing its
// blocks; it will be recomputed (vLLM's recompute preemption).
func (e *Engine) preempt(s *seq, busy map[string]int) {
	e.running = remove(e.running, s)
	e.pool.free(s.blocks)
	s.blocks, s.cachedBlocks, s.computed, s.numNew = nil, 0, 0, 0
	s.c.Preemptions++
	e.preemptions++
	if l := s.req.Lora; l != "" {
		if busy[l]--; busy[l] <= 0 {
			delete(busy, l)
		}
	}
	e.waiting = append([]*seq{s}, e.waiting...)
}

// finishStep applies a step's work to s: caches newly full prompt blocks
// (announcing them), samples a token when all its tokens are computed, and
// completes it at its last token.
func (e *Engine) finishStep(s *seq, res *StepResult) {
	bs := e.cfg.BlockSize
	s.computed += s.numNew
	s.numNew = 0
	first := s.cachedBlocks
	for s.cachedBlocks < len(s.keys) && (s.cachedBlocks+1)*bs <= s.computed {
		i := s.cachedBlocks
		var parent kvevents.Digest
		if i > 0 {
			parent = s.blocks[i-1].digest
		}
		d := digest(parent, s.req.Lora, s.req.Tokens[i*bs:(i+1)*bs])
		e.pool.cache(s.blocks[i], s.keys[i], d)
		e.cpu.store(s.keys[i])
		s.cachedBlocks++
	}
	if s.cachedBlocks > first {
		ev := kvevents.Event{
			Kind:      kvblock.BlockStored,
			TokenIDs:  s.req.Tokens[first*bs : s.cachedBlocks*bs],
			BlockSize: bs,
			LoraName:  s.req.Lora,
			LoraID:    e.loras.id(s.req.Lora),
		}
		for _, b := range s.blocks[first:s.cachedBlocks] {
			ev.Hashes = append(ev.Hashes, b.digest)
		}
		if first > 0 {
			ev.Parent, ev.HasParent = s.blocks[first-1].digest, true
		}
		e.pool.events = append(e.pool.events, ev)
	}
	if s.computed < s.all() {
		return
	}
	s.out++
	e.generated++
	o := Output{ID: s.req.ID}
	if !s.firstSet {
		s.firstSet, o.First = true, true
		s.c.FirstToken = e.now
	}
	if s.out >= s.req.MaxTokens {
		o.Done = true
		s.c.Finish = e.now
		s.c.OutputTokens = s.out
		e.pool.free(s.blocks)
		s.blocks = nil
		e.running = remove(e.running, s)
		delete(e.byID, s.req.ID)
		e.completed++
		res.Completed = append(res.Completed, s.c)
	}
	res.Outputs = append(res.Outputs, o)
}

// digest is the simulated engine block hash: SHA-256 over the parent's
// hash, the adapter name and the block's tokens. It is deliberately not
// rolter's block key, so consumers must derive keys from token ids.
func digest(parent kvevents.Digest, lora string, tokens []uint32) kvevents.Digest {
	h := sha256.New()
	h.Write(parent[:])
	h.Write([]byte(lora))
	h.Write([]byte{0})
	var b [4]byte
	for _, t := range tokens {
		binary.BigEndian.PutUint32(b[:], t)
		h.Write(b[:])
	}
	var d kvevents.Digest
	h.Sum(d[:0])
	return d
}

// ClearCache forgets every cached block (GPU and CPU tier) and returns the
// AllBlocksCleared event (a fault hook; vLLM's reset_prefix_cache).
func (e *Engine) ClearCache() []kvevents.Event {
	e.pool.clear()
	e.cpu.clear()
	return e.pool.takeEvents()
}

// LoadAdapter makes an adapter resident now (API load); it reports false
// when every slot is busy.
func (e *Engine) LoadAdapter(name string) bool {
	busy := make(map[string]int)
	for _, s := range e.running {
		if s.req.Lora != "" {
			busy[s.req.Lora]++
		}
	}
	_, ok := e.loras.ensure(name, busy)
	return ok
}

// UnloadAdapter drops an adapter from residency.
func (e *Engine) UnloadAdapter(name string) bool { return e.loras.unload(name) }

// Stats returns a snapshot of the engine's state and counters.
func (e *Engine) Stats() Stats {
	st := Stats{
		Now:              e.now,
		Running:          len(e.running),
		Waiting:          len(e.waiting),
		UsedBlocks:       e.pool.used(),
		TotalBlocks:      len(e.pool.blocks),
		PrefixQueries:    e.queries,
		PrefixHits:       e.hits,
		PreemptedQueries: e.preQueries,
		PreemptedHits:    e.preHits,
		CPUUsedBlocks:    e.cpu.used(),
		Preemptions:      e.preemptions,
		LoraLoads:        e.loras.loads,
		ResidentLoras:    e.loras.names(),
		RunningLoras:     loraNames(e.running),
		WaitingLoras:     loraNames(e.waiting),
		CompletedTotal:   e.completed,
		GeneratedTokens:  e.generated,
		PromptTokens:     e.prompt,
	}
	if e.cpu != nil {
		st.CPUTotalBlocks = e.cpu.capacity
		st.CPUHitTokens = e.cpu.hits
	}
	return st
}

func loraNames(list []*seq) []string {
	seen := make(map[string]bool)
	var out []string
	for _, s := range list {
		if l := s.req.Lora; l != "" && !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}
