package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/rolter/rolter/sim/tokenizer"
)

// ErrGenerator is returned for an unknown generator or bad parameters.
var ErrGenerator = errors.New("workload: bad generator")

// arrivals draws Poisson arrival times at rate per second.
type arrivals struct {
	rng  *rand.Rand
	rate float64
	t    time.Duration
}

func (a *arrivals) next() time.Duration {
	if a.rate > 0 {
		a.t += time.Duration(a.rng.ExpFloat64() / a.rate * float64(time.Second))
	}
	return a.t
}

// zipf draws ranks in [0, n) with P(k) ∝ 1/(k+1)^s; s ≤ 1 is treated as
// 1.0001 (rand.Zipf needs s > 1).
func zipf(rng *rand.Rand, s float64, n int) *rand.Zipf {
	return rand.NewZipf(rng, math.Max(s, 1.0001), 1, uint64(max(n-1, 0)))
}

// words returns n one-token words of the stream keyed by id.
func words(id uint64, n int) string {
	b := make([]byte, 0, n*7)
	for i := 0; i < n; i++ {
		b = append(b, tokenizer.SyntheticWord(id, i)...)
	}
	return string(b)
}

// Chat is a multi-turn chat workload: Sessions conversations, each over one
// of SystemPrompts shared system prompts (Zipf-popular), of Turns turns;
// each turn resends the whole history plus a new user message.
type Chat struct {
	Seed          uint64
	Sessions      int
	Turns         int
	SystemPrompts int
	SystemTokens  int
	UserTokens    int
	OutputTokens  int
	ZipfS         float64
	// Rate is new sessions per second; ThinkTime separates a session's turns.
	Rate      float64
	ThinkTime time.Duration
}

// Generate returns the workload's requests in time order.
func (c Chat) Generate() []Request {
	rng := rand.New(rand.NewPCG(c.Seed, 1))
	arr := arrivals{rng: rng, rate: c.Rate}
	z := zipf(rng, c.ZipfS, c.SystemPrompts)
	var out []Request
	for s := 0; s < c.Sessions; s++ {
		start := arr.next()
		sys := z.Uint64()
		history := []tokenizer.Message{{Role: "system", Content: words(1<<40|sys, c.SystemTokens)}}
		for turn := 0; turn < c.Turns; turn++ {
			user := words(uint64(2<<40)|uint64(s)<<16|uint64(turn), c.UserTokens)
			history = append(history, tokenizer.Message{Role: "user", Content: user})
			r := fromMessages(Request{
				At:        start + time.Duration(turn)*c.ThinkTime,
				Messages:  append([]tokenizer.Message(nil), history...),
				MaxTokens: c.OutputTokens,
				Session:   "chat-" + strconv.Itoa(s),
			})
			out = append(out, r)
			// The reply as the client would resend it next turn.
			history = append(history, tokenizer.Message{Role: "assistant", Content: words(uint64(3<<40)|uint64(s)<<16|uint64(turn), c.OutputTokens)})
		}
	}
	sortByTime(out)
	return out
}

// RAG is retrieval-augmented generation: each request carries TopK of
// Documents documents, drawn Zipf-popular, after a fixed system prompt,
// then a unique question.
type RAG struct {
	Seed          uint64
	Requests      int
	Documents     int
	DocTokens     int
	TopK          int
	SystemTokens  int
	QuestionToken int
	OutputTokens  int
	ZipfS         float64
	Rate          float64
}

// Generate returns the workload's requests in time order.
func (g RAG) Generate() []Request {
	rng := rand.New(rand.NewPCG(g.Seed, 2))
	arr := arrivals{rng: rng, rate: g.Rate}
	z := zipf(rng, g.ZipfS, g.Documents)
	sys := words(4<<40, g.SystemTokens)
	out := make([]Request, 0, g.Requests)
	for i := 0; i < g.Requests; i++ {
		ctx := ""
		seen := map[uint64]bool{}
		for len(seen) < min(g.TopK, g.Documents) {
			d := z.Uint64()
			if seen[d] {
				continue
			}
			seen[d] = true
			ctx += "\n" + words(5<<40|d, g.DocTokens)
		}
		out = append(out, fromMessages(Request{
			At: arr.next(),
			Messages: []tokenizer.Message{
				{Role: "system", Content: sys},
				{Role: "user", Content: "Documents:" + ctx + "\nQuestion:" + words(6<<40|uint64(i), g.QuestionToken)},
			},
			MaxTokens: g.OutputTokens,
		}))
	}
	return out
}

// LoraMix spreads requests over Adapters LoRA adapters with Zipf
// popularity; each adapter has its own system prompt of PrefixTokens.
type LoraMix struct {
	Seed         uint64
	Requests     int
	Adapters     int
	ZipfS        float64
	PrefixTokens int
	PromptTokens int
	OutputTokens int
	Rate         float64
}

// AdapterName is the name of adapter k in a LoRA mix.
func AdapterName(k int) string { return fmt.Sprintf("adapter-%03d", k) }

// Generate returns the workload's requests in time order.
func (g LoraMix) Generate() []Request {
	rng := rand.New(rand.NewPCG(g.Seed, 3))
	arr := arrivals{rng: rng, rate: g.Rate}
	z := zipf(rng, g.ZipfS, g.Adapters)
	out := make([]Request, 0, g.Requests)
	for i := 0; i < g.Requests; i++ {
		k := z.Uint64()
		out = append(out, fromMessages(Request{
			At: arr.next(),
			Messages: []tokenizer.Message{
				{Role: "system", Content: words(7<<40|k, g.PrefixTokens)},
				{Role: "user", Content: words(8<<40|uint64(i), g.PromptTokens)},
			},
			MaxTokens: g.OutputTokens,
			Model:     AdapterName(int(k)),
		}))
	}
	return out
}

// Synthetic builds a named generator's requests with sensible defaults
// scaled to n requests at rate per second: "chat", "rag" or "lora".
func Synthetic(name string, seed uint64, n int, rate float64) ([]Request, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: need a positive request count", ErrGenerator)
	}
	switch name {
	case "chat":
		turns := 4
		return Chat{Seed: seed, Sessions: (n + turns - 1) / turns, Turns: turns, SystemPrompts: 8, SystemTokens: 1024,
			UserTokens: 128, OutputTokens: 128, ZipfS: 1.2, Rate: rate / float64(turns), ThinkTime: 5 * time.Second}.Generate()[:n], nil
	case "rag":
		return RAG{Seed: seed, Requests: n, Documents: 200, DocTokens: 1024, TopK: 3, SystemTokens: 256,
			QuestionToken: 64, OutputTokens: 128, ZipfS: 1.1, Rate: rate}.Generate(), nil
	case "lora":
		return LoraMix{Seed: seed, Requests: n, Adapters: 64, ZipfS: 1.1, PrefixTokens: 512, PromptTokens: 256,
			OutputTokens: 128, Rate: rate}.Generate(), nil
	}
	return nil, fmt.Errorf("%w: %q (want chat, rag or lora)", ErrGenerator, name)
}
