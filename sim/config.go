package sim

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/rolter/rolter/sim/engine"
	"github.com/rolter/rolter/sim/kvevents"
)

// Config is everything `rolter sim` takes from its flags.
type Config struct {
	HTTPAddr string
	// Model is the served model name.
	Model       string
	Engine      engine.Config
	Speed       float64
	Seed        uint64
	LoraModules []string // adapters registered at start
	// LoraAny serves any model name as an adapter without loading it first.
	LoraAny bool

	KVEvents       string // PUB endpoint; "" disables
	KVEventsReplay string // ROUTER endpoint; "" disables
	KVEncoding     kvevents.Encoding
	KVTopic        string
	KVDial         kvevents.Dial
	KVFirstSeq     uint64
	DPRank         int

	// LMCache enables the simulated CPU tier signal (Engine.CPUTierBlocks
	// sizes it).
	LMCache bool

	Faults Faults

	// GenerationLog, when set, is a file that gets one JSON line per
	// generation: what the engine sent and how it ended (genlog.go).
	GenerationLog string

	// ClientClock makes a request that carries SentAtHeader arrive at the
	// engine when its client sent it rather than when it got here, so a
	// benchmark on one host (rolter bench fleet) measures the engines'
	// queues without the HTTP path's delays, which --speed multiplies.
	ClientClock bool
}

// SentAtHeader carries a request's send time on the client's clock, in
// Unix nanoseconds; rolter sim reads it with --client-clock.
const SentAtHeader = "X-Rolter-Sent-At"

// DefaultModelName is the model the simulator serves unless told.
const DefaultModelName = "meta-llama/Llama-3.1-8B-Instruct"

// DefaultConfig returns the defaults of `rolter sim`.
func DefaultConfig() Config {
	ec := engine.DefaultConfig
	return Config{
		HTTPAddr: "127.0.0.1:8000",
		Model:    DefaultModelName,
		Engine:   ec,
		Speed:    1,
		Seed:     1,
		KVTopic:  "",
		Faults:   Faults{RetryAfter: 5},
	}
}

// Faults are the injected failures. Rates are probabilities per request.
// Only generations (completions, chat) get them: /v1/models and /health
// keep answering, as an overloaded engine's do.
type Faults struct {
	// ErrorRate requests are answered Status.
	ErrorRate float64 `json:"error_rate"`
	// Status is the HTTP status of the error_rate answers (0: 500), e.g.
	// 503 for an overloaded engine.
	Status        int     `json:"status"`
	RateLimitRate float64 `json:"rate_limit_rate"`
	// RetryAfter is the Retry-After of a 429, in seconds.
	RetryAfter int `json:"retry_after_seconds"`
	// HangRate requests never get a first token: the response stays open
	// until the client gives up.
	HangRate float64 `json:"hang_rate"`
	// DieRate requests lose their connection half-way through the output.
	DieRate float64 `json:"die_rate"`
	// Slowdown multiplies every step's duration (≤ 1: none).
	Slowdown float64 `json:"slowdown"`

	// Where dying streams die (stream resume tests).
	// DieAfterTokens > 0 makes a DieRate request lose its connection
	// right after its K-th token instead of half-way.
	DieAfterTokens int `json:"die_after_tokens"`
}

// Validate reports a rate outside [0,1], an error status that is not an
// HTTP error (400–599) or a negative die_after_tokens.
func (f Faults) Validate() error {
	for _, v := range []float64{f.ErrorRate, f.RateLimitRate, f.HangRate, f.DieRate} {
		if v < 0 || v > 1 {
			return errors.New("rates must be within [0,1]")
		}
	}
	if f.Status != 0 && (f.Status < 400 || f.Status > 599) {
		return fmt.Errorf("status %d is not an HTTP error status (400-599)", f.Status)
	}
	if f.DieAfterTokens < 0 {
		return errors.New("die_after_tokens must be ≥ 0")
	}
	return nil
}

// errorStatus is the status of an error_rate answer.
func (f Faults) errorStatus() int {
	if f.Status == 0 {
		return http.StatusInternalServerError
	}
	return f.Status
}
