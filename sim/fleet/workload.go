package fleet

import (
	"errors"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/rolter/rolter/kvblock"
	"github.com/rolter/rolter/router/admission"
	"github.com/rolter/rolter/sim/engine"
	"github.com/rolter/rolter/sim/tokenizer"
	"github.com/rolter/rolter/sim/workload"
	"github.com/rolter/rolter/strategies"
)

// ErrWorkload marks a workload the simulator cannot run.
var ErrWorkload = errors.New("fleet: bad workload")

// Request is one request of a fleet workload.
type Request struct {
	// At is the arrival time at the fleet as recorded; Config.Rate rescales it.
	At        time.Duration
	Tokens    []uint32
	MaxTokens int
	// Text is the prompt as a client sends it; when empty the token ids
	// are rendered to a deterministic text (see RenderTokens).
	Text    string
	Adapter string
	Session string
	// Band is the request's priority band (x-rolter-priority); the zero
	// value is sheddable, FromWorkload sets standard.
	Band admission.Band
}

// FromWorkload converts the sim's workload requests (trace or synthetic).
func FromWorkload(reqs []workload.Request) []Request {
	out := make([]Request, len(reqs))
	for i, r := range reqs {
		text := r.Text
		if text == "" && len(r.Messages) > 0 {
			text = tokenizer.Render(r.Messages)
		}
		out[i] = Request{At: r.At, Tokens: r.Tokens, MaxTokens: max(r.MaxTokens, 1), Text: text,
			Adapter: r.Model, Session: r.Session, Band: admission.Standard}
	}
	return out
}

// prepared is a request with the parts of its RouteContext that do not
// depend on the run, computed once.
type prepared struct {
	Request
	rc strategies.RouteContext
}

// Workload is a prepared, immutable request list shared read-only by runs.
type Workload struct {
	reqs     []prepared
	span     time.Duration // last arrival − first arrival, as recorded
	adapters bool
}

// Len is the number of requests.
func (w *Workload) Len() int { return len(w.reqs) }

// Prepare validates reqs (in arrival order) and computes each request's
// routing context the way the router does: the prompt text bounded to
// strategies.MaxPromptBytes, its full length and digest, the token ids and
// their block keys (engine block size, keyed by the adapter), the session
// key and the adapter.
func Prepare(reqs []Request, blockSize int) (*Workload, error) {
	if len(reqs) == 0 {
		return nil, errors.Join(ErrWorkload, errors.New("no requests"))
	}
	if blockSize <= 0 {
		blockSize = kvblock.DefaultBlockSize
	}
	w := &Workload{reqs: make([]prepared, len(reqs))}
	for i, r := range reqs {
		if len(r.Tokens) == 0 {
			return nil, errors.Join(ErrWorkload, errors.New("request "+strconv.Itoa(i)+" has no tokens"))
		}
		if i > 0 && r.At < reqs[i-1].At {
			return nil, errors.Join(ErrWorkload, errors.New("requests not in arrival order"))
		}
		p := prepared{Request: r}
		p.MaxTokens = max(p.MaxTokens, 1)
		var prompt string
		var full int
		var digest uint64
		if r.Text != "" {
			prompt, full = r.Text, len(r.Text)
			if len(prompt) > strategies.MaxPromptBytes {
				prompt = prompt[:strategies.MaxPromptBytes]
			}
			h := fnv.New64a()
			h.Write([]byte(r.Text))
			digest = h.Sum64()
		} else {
			prompt, full, digest = RenderTokens(r.Tokens, strategies.MaxPromptBytes)
		}
		p.rc = strategies.RouteContext{
			Model:        "fleet",
			SessionKey:   r.Session,
			Prompt:       prompt,
			PromptLen:    full,
			PromptDigest: digest,
			PromptTokens: len(r.Tokens),
			TokenIDs:     r.Tokens,
			BlockKeys:    kvblock.Keys(nil, r.Tokens, blockSize, kvblock.Extra(r.Adapter, "")),
			Adapter:      r.Adapter,
		}
		if r.Adapter != "" {
			w.adapters = true
		}
		w.reqs[i] = p
	}
	w.span = reqs[len(reqs)-1].At - reqs[0].At
	return w, nil
}

// RenderTokens renders token ids as the text "t<id in base 36> " per token,
// deterministically, so that prompts sharing a token prefix share a text
// prefix. It returns the text bounded to limit bytes, the full text's
// length and an FNV-1a digest of the full text.
func RenderTokens(tokens []uint32, limit int) (text string, full int, digest uint64) {
	b := make([]byte, 0, min(limit, len(tokens)*6))
	h := fnv.New64a()
	var word [16]byte
	for _, t := range tokens {
		w := append(word[:0], 't')
		w = strconv.AppendUint(w, uint64(t), 36)
		w = append(w, ' ')
		h.Write(w)
		full += len(w)
		if len(b)+len(w) <= limit {
			b = append(b, w...)
		}
	}
	return string(b), full, h.Sum64()
}

// ServiceDemand is the engine time one request needs without any prefix
// cache hit, by the step model m: its prefill (PrefillToken per prompt
// token) plus its decode (per output token: DecodeSeq, ContextToken times
// its mean context, and the step Base shared by a full batch of `batch`
// sequences).
func ServiceDemand(m engine.StepModel, prompt, output, batch int) time.Duration {
	ctx := prompt + output/2
	perToken := m.DecodeSeq + time.Duration(ctx)*m.ContextToken + m.Base/time.Duration(max(batch, 1))
	return time.Duration(prompt)*m.PrefillToken + time.Duration(output)*perToken
}

// Capacity is the fleet's capacity in requests per second for w: engines
// divided by the mean ServiceDemand of w's requests, where a full batch is
// as many mean-sized requests as the KV cache holds (capped by
// MaxNumSeqs). It ignores prefix caching on purpose, so that a load of 1
// means "every engine busy all the time if nothing were cached" whatever
// the routing.
func Capacity(w *Workload, engines int, cfg engine.Config) float64 {
	return CachedCapacity(w, engines, cfg, 0)
}

// CachedCapacity is Capacity with a fraction hit of every prompt found in
// the prefix cache (its prefill skipped): the capacity a run with that
// hit rate actually has. The admission benchmark lays its burst out on it,
// so that 1.5 of capacity does overload the fleet.
func CachedCapacity(w *Workload, engines int, cfg engine.Config, hit float64) float64 {
	cfg = withEngineDefaults(cfg)
	var prompt, output int
	for _, r := range w.reqs {
		prompt += len(r.Tokens)
		output += r.MaxTokens
	}
	n := len(w.reqs)
	mean := (prompt + output) / n
	batch := min(cfg.MaxNumSeqs, cfg.KVBlocks*cfg.BlockSize/max(mean, 1))
	var demand time.Duration
	for _, r := range w.reqs {
		p := len(r.Tokens)
		demand += ServiceDemand(cfg.Model, p, r.MaxTokens, batch) -
			time.Duration(float64(p)*min(max(hit, 0), 1))*cfg.Model.PrefillToken
	}
	meanDemand := demand.Seconds() / float64(n)
	if meanDemand <= 0 {
		return 0
	}
	return float64(engines) / meanDemand
}

// RecordedRate is w's mean arrival rate as recorded, in requests per second.
func (w *Workload) RecordedRate() float64 {
	if w.span <= 0 {
		return 0
	}
	return float64(len(w.reqs)-1) / w.span.Seconds()
}

func withEngineDefaults(cfg engine.Config) engine.Config {
	return engine.New(cfg).Config()
}
