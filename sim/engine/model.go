package engine

import "time"

// StepModel is the duration of one scheduler step (one forward pass of the
// batch) as a linear function of the work in it:
//
//	step = Base + PrefillToken·prefill + DecodeSeq·decoding + ContextToken·context
//	     + LoadedToken·loaded
//
// where prefill is the number of prompt tokens computed in the step,
// decoding the number of sequences producing one token, context the total
// number of tokens the batch's attention reads (every scheduled sequence's
// context after the step) and loaded the tokens fetched from the CPU
// (LMCache) tier instead of being computed.
type StepModel struct {
	Base         time.Duration
	PrefillToken time.Duration
	DecodeSeq    time.Duration
	ContextToken time.Duration
	LoadedToken  time.Duration
}

// DefaultModel resembles Llama-3.1-8B-Instruct in BF16 on one H100-80GB SXM
// under vLLM v1 (see the package documentation for the sources).
var DefaultModel = StepModel{
	Base:         6 * time.Millisecond,
	PrefillToken: 60 * time.Microsecond,
	DecodeSeq:    50 * time.Microsecond,
	ContextToken: 40 * time.Nanosecond,
	LoadedToken:  6 * time.Microsecond,
}

// Instant is the zero model: steps take no time (router-overhead benchmarks).
var Instant = StepModel{}

// Step returns the duration of a step with the given work.
func (m StepModel) Step(prefill, decoding, context, loaded int) time.Duration {
	if prefill == 0 && decoding == 0 && loaded == 0 {
		return 0
	}
	return m.Base +
		time.Duration(prefill)*m.PrefillToken +
		time.Duration(decoding)*m.DecodeSeq +
		time.Duration(context)*m.ContextToken +
		time.Duration(loaded)*m.LoadedToken
}

// Scaled returns m with every coefficient multiplied by f (a slowdown
// fault uses f > 1).
func (m StepModel) Scaled(f float64) StepModel {
	s := func(d time.Duration) time.Duration { return time.Duration(float64(d) * f) }
	return StepModel{s(m.Base), s(m.PrefillToken), s(m.DecodeSeq), s(m.ContextToken), s(m.LoadedToken)}
}

// SingleRequest predicts, for one request alone on an idle engine with no
// cache hits, its time to first token and its time per output token after
// the first, given the scheduler's per-step token budget. Tests and the
// documentation use it as the reference the engine must match.
func (m StepModel) SingleRequest(prompt, output, budget int) (ttft, tpot time.Duration) {
	done := 0
	for done < prompt {
		n := min(prompt-done, budget)
		done += n
		ttft += m.Step(n, 0, done, 0)
	}
	if output > 1 {
		var total time.Duration
		for i := 1; i < output; i++ {
			total += m.Step(0, 1, prompt+i, 0)
		}
		tpot = total / time.Duration(output-1)
	}
	return ttft, tpot
}
