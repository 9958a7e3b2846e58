package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rolter/rolter/sim/engine"
	"github.com/rolter/rolter/sim/kvevents"
	"github.com/rolter/rolter/sim/tokenizer"
)

// ErrCrashed is returned by Serve after an injected crash.
var ErrCrashed = errors.New("sim: crashed by fault injection")

// Server is one simulated vLLM engine: the OpenAI HTTP surface, /metrics,
// the admin/fault endpoints, and the real-time driver over the engine
// model. Build it with New, start its step loop with Run, serve Handler.
type Server struct {
	cfg     Config
	log     *slog.Logger
	drv     *driver
	pub     *kvevents.Publisher
	reg     *prometheus.Registry
	lat     *latency
	created int64

	mu       sync.Mutex
	faults   Faults
	adapters map[string]bool
	rng      *rand.Rand

	seq     atomic.Uint64
	crashed chan struct{}
	crashMu sync.Once

	gen genLog // genlog.go
}

// New builds a server from cfg. clock may be nil (wall clock). pub, when
// not nil, receives every step's KV events.
func New(cfg Config, log *slog.Logger, clock Clock, pub *kvevents.Publisher) *Server {
	if clock == nil {
		clock = wallClock{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if !cfg.LMCache {
		cfg.Engine.CPUTierBlocks = 0
	}
	eng := engine.New(cfg.Engine)
	s := &Server{
		cfg:      cfg,
		log:      log,
		drv:      newDriver(eng, clock, cfg.Speed),
		pub:      pub,
		reg:      prometheus.NewRegistry(),
		created:  clock.Now().Unix(),
		adapters: make(map[string]bool),
		rng:      rand.New(rand.NewPCG(cfg.Seed, 0x5153)),
		crashed:  make(chan struct{}),
	}
	for _, a := range cfg.LoraModules {
		s.adapters[a] = true
	}
	s.reg.MustRegister(newCollector(s))
	s.lat = newLatency(s.reg)
	s.drv.onDone = func(c engine.Completion) { s.lat.observe(cfg.Model, c) }
	if pub != nil {
		s.drv.onStep = func(r engine.StepResult) {
			if err := pub.Publish(r.Events); err != nil {
				s.log.Warn("kv events publish failed", "err", err)
			}
		}
	}
	s.setFaults(cfg.Faults)
	return s
}

// Run drives the engine in real time until ctx ends.
func (s *Server) Run(ctx context.Context) { s.drv.run(ctx) }

// Crashed is closed after an injected crash.
func (s *Server) Crashed() <-chan struct{} { return s.crashed }

// Handler returns the HTTP surface.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /v1/load_lora_adapter", s.handleLoadLora)
	mux.HandleFunc("POST /v1/unload_lora_adapter", s.handleUnloadLora)
	if s.cfg.LMCache {
		mux.HandleFunc("GET /lmcache", s.handleLMCache)
	}
	mux.HandleFunc("GET /sim/faults", s.handleGetFaults)
	mux.HandleFunc("POST /sim/faults", s.handleSetFaults)
	mux.HandleFunc("POST /sim/kv/skip", s.handleKVSkip)
	mux.HandleFunc("POST /sim/kv/restart", s.handleKVRestart)
	mux.HandleFunc("POST /sim/kv/clear", s.handleKVClear)
	mux.HandleFunc("POST /sim/crash", s.handleCrash)
	mux.HandleFunc("GET /sim/stats", s.handleStats)
	return mux
}

// resolveModel maps a request's model to an adapter name ("" = base).
func (s *Server) resolveModel(model string) (string, error) {
	if model == "" || model == s.cfg.Model {
		return "", nil
	}
	s.mu.Lock()
	ok := s.adapters[model]
	s.mu.Unlock()
	if ok || s.cfg.LoraAny {
		return model, nil
	}
	return "", fmt.Errorf("%w: the model `%s` does not exist", errUnknownModel, model)
}

func (s *Server) setFaults(f Faults) {
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
	m := s.cfg.Engine.Model
	if s.cfg.Engine.Instant {
		m = engine.Instant
	} else if m == (engine.StepModel{}) {
		m = engine.DefaultModel
	}
	if f.Slowdown > 1 {
		m = m.Scaled(f.Slowdown)
	}
	s.drv.with(func(e *engine.Engine) { e.SetModel(m) })
}

// fate is what the fault injector decided for one request.
type fate struct {
	status     int // Faults.Status or 429, 0 for none
	retryAfter int
	hang       bool
	die        bool
	dieAfter   int // tokens sent before dying (0: half the output)
}

func (s *Server) drawFate() fate {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	var out fate
	switch {
	case f.ErrorRate > 0 && s.rng.Float64() < f.ErrorRate:
		out.status = f.errorStatus()
	case f.RateLimitRate > 0 && s.rng.Float64() < f.RateLimitRate:
		out.status, out.retryAfter = http.StatusTooManyRequests, max(f.RetryAfter, 1)
	case f.HangRate > 0 && s.rng.Float64() < f.HangRate:
		out.hang = true
	case f.DieRate > 0 && s.rng.Float64() < f.DieRate:
		out.die = true
	}
	out.dieAfter = f.DieAfterTokens
	return out
}

// errorType names an injected error status the way vLLM's error bodies
// do: InternalServerError, ServiceUnavailableError, BadGatewayError, ...
func errorType(status int) string {
	name := strings.ReplaceAll(http.StatusText(status), " ", "")
	if name == "" {
		return "EngineError"
	}
	if strings.HasSuffix(name, "Error") {
		return name
	}
	return name + "Error"
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	s.serveGeneration(w, r, false)
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.serveGeneration(w, r, true)
}

func (s *Server) serveGeneration(w http.ResponseWriter, r *http.Request, chat bool) {
	var req completionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "invalid JSON body: "+err.Error())
		return
	}
	lora, err := s.resolveModel(req.Model)
	if err != nil {
		writeError(w, http.StatusNotFound, "NotFoundError", err.Error())
		return
	}
	var tokens []uint32
	maxTokens := 16
	if chat {
		var tpl tokenizer.Template
		if tpl, err = req.template(); err == nil {
			tokens, err = chatTokens(req.Messages, tpl)
		}
		maxTokens = 128
	} else if len(req.Prompt) == 0 {
		err = fmt.Errorf("%w: prompt is required", errBadRequest)
	} else {
		tokens, err = promptTokens(req.Prompt)
	}
	if err == nil && len(tokens) == 0 {
		err = fmt.Errorf("%w: prompt is empty", errBadRequest)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	if req.MaxCompletionTokens != nil {
		maxTokens = *req.MaxCompletionTokens
	} else if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	if maxTokens < 1 {
		writeError(w, http.StatusBadRequest, "BadRequestError", "max_tokens must be at least 1")
		return
	}
	f := s.drawFate()
	switch {
	case f.status == http.StatusTooManyRequests:
		w.Header().Set("Retry-After", strconv.Itoa(f.retryAfter))
		writeError(w, f.status, "RateLimitError", "rate limited (injected fault)")
		return
	case f.status != 0:
		writeError(w, f.status, errorType(f.status), "engine error (injected fault)")
		return
	case f.hang:
		<-r.Context().Done()
		return
	}
	n := s.seq.Add(1)
	prefix := "cmpl-"
	if chat {
		prefix = "chatcmpl-"
	}
	id := prefix + strconv.FormatUint(n, 10)
	var sent time.Time
	if s.cfg.ClientClock {
		if ns, err := strconv.ParseInt(r.Header.Get(SentAtHeader), 10, 64); err == nil && ns > 0 {
			sent = time.Unix(0, ns)
		}
	}
	p, err := s.drv.submit(engine.Request{ID: id, Tokens: tokens, MaxTokens: maxTokens, Lora: lora}, sent)
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	g := generation{s: s, id: id, seed: n, model: req.Model, chat: chat, prompt: len(tokens), max: maxTokens, p: p}
	if g.model == "" {
		g.model = s.cfg.Model
	}
	if f.die {
		g.dieAt = max(maxTokens/2, 1)
		if f.dieAfter > 0 {
			g.dieAt = f.dieAfter
		}
	}
	g.requestID, g.continued = r.Header.Get("X-Request-Id"), req.ContinueFinalMessage
	if g.continued && len(req.Messages) > 0 {
		g.continuedText, _ = req.Messages[len(req.Messages)-1].text()
	}
	if req.Stream {
		g.stream(w, r, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
	} else {
		g.whole(w, r)
	}
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID          string  `json:"id"`
		Object      string  `json:"object"`
		Created     int64   `json:"created"`
		OwnedBy     string  `json:"owned_by"`
		Root        string  `json:"root"`
		Parent      *string `json:"parent"`
		MaxModelLen int     `json:"max_model_len"`
	}
	data := []model{{ID: s.cfg.Model, Object: "model", Created: s.created, OwnedBy: "vllm", Root: s.cfg.Model, MaxModelLen: s.drv.eng.Config().MaxModelLen}}
	s.mu.Lock()
	names := make([]string, 0, len(s.adapters))
	for a := range s.adapters {
		names = append(names, a)
	}
	s.mu.Unlock()
	sort.Strings(names)
	for _, a := range names {
		parent := s.cfg.Model
		data = append(data, model{ID: a, Object: "model", Created: s.created, OwnedBy: "vllm", Root: a, Parent: &parent, MaxModelLen: s.drv.eng.Config().MaxModelLen})
	}
	writeJSON(w, map[string]any{"object": "list", "data": data})
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string        `json:"model"`
		Prompt   *string       `json:"prompt"`
		Messages []chatMessage `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "invalid JSON body: "+err.Error())
		return
	}
	var tokens []uint32
	var err error
	switch {
	case req.Prompt != nil:
		tokens = tokenizer.Encode(nil, *req.Prompt)
	case len(req.Messages) > 0:
		tokens, err = chatTokens(req.Messages, tokenizer.Template{GenerationPrompt: true})
	default:
		err = fmt.Errorf("%w: prompt or messages is required", errBadRequest)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	if tokens == nil {
		tokens = []uint32{}
	}
	writeJSON(w, map[string]any{"count": len(tokens), "max_model_len": s.drv.eng.Config().MaxModelLen, "tokens": tokens})
}

func (s *Server) handleLoadLora(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"lora_name"`
		Path string `json:"lora_path"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Name == "" {
		writeError(w, http.StatusBadRequest, "BadRequestError", "lora_name is required")
		return
	}
	s.mu.Lock()
	dup := s.adapters[req.Name]
	s.adapters[req.Name] = true
	s.mu.Unlock()
	if dup {
		writeError(w, http.StatusBadRequest, "InvalidUserInput", fmt.Sprintf("The lora adapter '%s' has already been loaded.", req.Name))
		return
	}
	var ok bool
	s.drv.with(func(e *engine.Engine) { ok = e.LoadAdapter(req.Name) })
	if !ok {
		s.log.Info("lora registered; all slots busy, it will load on first use", "lora", req.Name)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.Name)
}

func (s *Server) handleUnloadLora(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"lora_name"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Name == "" {
		writeError(w, http.StatusBadRequest, "BadRequestError", "lora_name is required")
		return
	}
	s.mu.Lock()
	known := s.adapters[req.Name]
	delete(s.adapters, req.Name)
	s.mu.Unlock()
	var resident bool
	s.drv.with(func(e *engine.Engine) { resident = e.UnloadAdapter(req.Name) })
	if !known && !resident {
		writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The lora adapter '%s' cannot be found.", req.Name))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", req.Name)
}

// LMCacheSignal is the polled occupancy contract of lmcache_aware.
type LMCacheSignal struct {
	Occupancy      float64 `json:"occupancy"`
	CacheAvailable bool    `json:"cache_available"`
}

func (s *Server) handleLMCache(w http.ResponseWriter, _ *http.Request) {
	var st engine.Stats
	s.drv.with(func(e *engine.Engine) { st = e.Stats() })
	sig := LMCacheSignal{}
	if st.CPUTotalBlocks > 0 {
		sig.Occupancy = float64(st.CPUUsedBlocks) / float64(st.CPUTotalBlocks)
		sig.CacheAvailable = true
	}
	writeJSON(w, sig)
}

func (s *Server) handleGetFaults(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	f := s.faults
	s.mu.Unlock()
	writeJSON(w, f)
}

// handleSetFaults merges the posted fields into the current faults.
func (s *Server) handleSetFaults(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	f := s.faults
	s.mu.Unlock()
	if err := json.NewDecoder(r.Body).Decode(&f); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "invalid faults: "+err.Error())
		return
	}
	if err := f.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "invalid faults: "+err.Error())
		return
	}
	s.setFaults(f)
	s.log.Info("faults updated", "faults", f)
	writeJSON(w, f)
}

func (s *Server) handleKVSkip(w http.ResponseWriter, r *http.Request) {
	if s.pub == nil {
		writeError(w, http.StatusConflict, "InvalidUserInput", "KV events are not enabled")
		return
	}
	var req struct {
		N int `json:"n"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.N < 1 {
		writeError(w, http.StatusBadRequest, "BadRequestError", `body must be {"n": count ≥ 1}`)
		return
	}
	s.pub.SkipNext(req.N)
	next, _, _ := s.pub.Stats()
	writeJSON(w, map[string]any{"skip_from": next, "skip_count": req.N})
}

func (s *Server) handleKVRestart(w http.ResponseWriter, _ *http.Request) {
	if s.pub == nil {
		writeError(w, http.StatusConflict, "InvalidUserInput", "KV events are not enabled")
		return
	}
	s.pub.RestartSequence()
	w.WriteHeader(http.StatusNoContent)
}

// handleKVClear drops every cached block and announces AllBlocksCleared.
func (s *Server) handleKVClear(w http.ResponseWriter, _ *http.Request) {
	var ev []kvevents.Event
	s.drv.with(func(e *engine.Engine) { ev = e.ClearCache() })
	if s.pub != nil {
		if err := s.pub.Publish(ev); err != nil {
			s.log.Warn("kv events publish failed", "err", err)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleCrash(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusAccepted)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	s.crashMu.Do(func() { close(s.crashed) })
}

// Stats is the /sim/stats view: the engine's counters with the hit rate.
type Stats struct {
	engine.Stats
	PrefixHitRate float64 `json:"prefix_hit_rate"`
}

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, s.Stats())
}

// Stats returns the engine's current counters.
func (s *Server) Stats() Stats {
	var st engine.Stats
	s.drv.with(func(e *engine.Engine) { st = e.Stats() })
	out := Stats{Stats: st}
	if st.PrefixQueries > 0 {
		out.PrefixHitRate = float64(st.PrefixHits) / float64(st.PrefixQueries)
	}
	return out
}

// generation writes one request's answer as its tokens arrive.
type generation struct {
	s      *Server
	id     string
	seed   uint64
	model  string
	chat   bool
	prompt int
	max    int
	dieAt  int
	p      *progress

	requestID     string // the client's X-Request-Id, for the generation log
	continued     bool   // continue_final_message was asked
	continuedText string // the final message's text then
}

// next waits for tokens beyond have; it returns the new count and whether
// the request is done. ok is false when the client went away.
func (g *generation) next(ctx context.Context, have int) (n int, done, ok bool) {
	for {
		n, done, _ = g.p.snapshot()
		if n > have || done {
			return n, done, true
		}
		select {
		case <-g.p.notify:
		case <-ctx.Done():
			g.s.drv.abort(g.id)
			return n, false, false
		}
	}
}

func (g *generation) usage() usage {
	_, _, c := g.p.snapshot()
	return usage{PromptTokens: g.prompt, CompletionTokens: g.max, TotalTokens: g.prompt + g.max,
		PromptTokensDetails: &promptDetails{CachedTokens: c.CachedTokens}}
}

// die aborts the connection mid-answer (injected fault) after sent
// tokens went out.
func (g *generation) die(sent int) {
	g.s.drv.abort(g.id)
	g.s.logGeneration(g, sent, "died")
	panic(http.ErrAbortHandler)
}

func (g *generation) whole(w http.ResponseWriter, r *http.Request) {
	have := 0
	for {
		n, done, ok := g.next(r.Context(), have)
		if !ok {
			g.s.logGeneration(g, 0, "client_left")
			return
		}
		have = n
		if g.dieAt > 0 && have >= g.dieAt {
			g.die(0)
		}
		if done {
			break
		}
	}
	text := tokenizer.Text(g.seed, g.max)
	created := time.Now().Unix()
	g.s.logGeneration(g, g.max, "done")
	if g.chat {
		writeJSON(w, map[string]any{
			"id": g.id, "object": "chat.completion", "created": created, "model": g.model,
			"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": text},
				"logprobs": nil, "finish_reason": "length"}},
			"usage": g.usage(),
		})
		return
	}
	writeJSON(w, map[string]any{
		"id": g.id, "object": "text_completion", "created": created, "model": g.model,
		"choices": []map[string]any{{"index": 0, "text": text, "logprobs": nil, "finish_reason": "length"}},
		"usage":   g.usage(),
	})
}

func (g *generation) stream(w http.ResponseWriter, r *http.Request, includeUsage bool) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	// The headers go now, as vLLM's streaming response sends them before
	// its first chunk: the client knows the engine has the request.
	if flusher != nil {
		flusher.Flush()
	}
	created := time.Now().Unix()
	object := "text_completion"
	if g.chat {
		object = "chat.completion.chunk"
	}
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			g.s.drv.abort(g.id)
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	choice := func(text string, finish any, first bool) map[string]any {
		c := map[string]any{"index": 0, "logprobs": nil, "finish_reason": finish}
		if g.chat {
			delta := map[string]any{"content": text}
			if first {
				delta["role"] = "assistant"
			}
			c["delta"] = delta
		} else {
			c["text"] = text
		}
		return c
	}
	chunk := func(choices []map[string]any) map[string]any {
		return map[string]any{"id": g.id, "object": object, "created": created, "model": g.model, "choices": choices}
	}
	have := 0
	for have < g.max {
		n, _, ok := g.next(r.Context(), have)
		if !ok {
			g.s.logGeneration(g, have, "client_left")
			return
		}
		for ; have < n; have++ {
			if g.dieAt > 0 && have >= g.dieAt {
				g.die(have)
			}
			var finish any
			if have == g.max-1 {
				finish = "length"
			}
			if !send(chunk([]map[string]any{choice(tokenizer.Word(g.seed, have), finish, have == 0)})) {
				g.s.logGeneration(g, have, "client_left")
				return
			}
		}
	}
	g.s.logGeneration(g, have, "done")
	if includeUsage {
		c := chunk([]map[string]any{})
		c["usage"] = g.usage()
		if !send(c) {
			return
		}
	}
	if _, err := fmt.Fprint(w, "data: [DONE]\n\n"); err == nil && flusher != nil {
		flusher.Flush()
	}
}
