package strategies

import "github.com/rolter/rolter/kvblock"

// PrefillWait scores a target by the prefill work this request would wait
// for there: the prompt tokens already queued for prefill on the target
// (RouteContext.QueuedPrefill) plus this request's own uncached tokens (its
// prompt minus the prefix of RouteContext.BlockKeys the target holds, read
// through Spec.Residency; without block keys or an EXACT view nothing is
// taken as resident). Time to first token grows with exactly that sum, so
// the target with the least of it scores 1 and another scores
//
//	score_i = 1 − (wait_i − wait_min) / (wait_min + PromptTokens + slack)
//
// where a target within Slack of the best counts as the best: every
// router of a mesh sees the others' queues somewhat late, and routers
// that all break a near-tie the same way send their next requests to the
// same engine (herding). Ties go to MaxScorePicker's random choice.
//
// Without QueuedPrefill (nil or shorter than the target list), and for a
// request addressing a LoRA adapter, the scorer is neutral (all 0) and the
// stack's other scorers decide: an adapter request's first token waits
// mostly for a slot in the engine's batch (max_loras adapters at once),
// which prefill work does not measure, and keeping it where its prefix
// (keyed with the adapter) is resident keeps the adapter there too.
// Inputs: RouteContext.QueuedPrefill, Adapter, BlockKeys, PromptTokens,
// Spec.Residency.
type PrefillWait struct {
	res Residency
	// Slack is the margin, in prompt tokens, within which targets tie.
	Slack int
}

// prefillSlack is precise_cache_aware's tie margin: one KV block. Waits
// closer than that are the same to an engine; a wider margin was measured
// (BENCHMARKS.md §1) to buy nothing against herding and, on short prompts,
// to hide the prefix a target holds.
const prefillSlack = 16

// Score implements Scorer.
func (s PrefillWait) Score(c *Cycle, cands []int, out []float64) {
	if !prefillDecides(c) || len(cands) == 0 {
		return
	}
	q := c.Ctx.QueuedPrefill
	keys := c.Ctx.BlockKeys
	prompt := max(c.Ctx.PromptTokens, len(keys)*kvblock.DefaultBlockSize)
	// Without a residency source or block keys nothing is resident: the
	// per-target scratch is neither cleared nor read.
	lookup := s.res != nil && len(keys) > 0
	resident := c.ints[:c.n]
	if lookup {
		clear(resident)
		if b, ok := s.res.(ResidencyBatch); ok {
			b.ResidentPrefixes(keys, resident)
		} else {
			for _, t := range cands {
				if n, ok := s.res.ResidentPrefix(t, keys); ok {
					resident[t] = n
				}
			}
		}
	}
	// out holds each candidate's wait until it is turned into a score.
	lo := -1.0
	own := float64(max(prompt, 0)) // every target's own tokens, nothing resident
	for k, t := range cands {
		if lookup {
			own = float64(max(prompt-min(max(resident[t], 0), len(keys))*kvblock.DefaultBlockSize, 0))
		}
		out[k] = float64(q[t]) + own
		if lo < 0 || out[k] < lo {
			lo = out[k]
		}
	}
	span := lo + float64(prompt) + float64(s.Slack) + 1
	for k := range cands {
		d := out[k] - lo - float64(s.Slack)
		if d <= 0 {
			out[k] = 1
			continue
		}
		out[k] = 1 - d/span
	}
}

// prefillDecides reports whether PrefillWait scores the cycle's request:
// the router supplied QueuedPrefill and the request addresses no adapter.
func prefillDecides(c *Cycle) bool { return len(c.Ctx.QueuedPrefill) >= c.n && c.Ctx.Adapter == "" }

// withoutPrefill is its scorer when PrefillWait does not decide (no
// QueuedPrefill, or an adapter request), and neutral (all 0) when it does.
type withoutPrefill struct{ Scorer }

// abstains reports that w scores nothing in c: PrefillWait decides.
func (w withoutPrefill) abstains(c *Cycle) bool { return prefillDecides(c) }

// Score implements Scorer.
func (w withoutPrefill) Score(c *Cycle, cands []int, out []float64) {
	if prefillDecides(c) {
		return
	}
	w.Scorer.Score(c, cands, out)
}

// Herding across routers. Routers of a mesh that receive requests at one
// instant would all place them on one shared picture of the fleet and send
// them to the engine that looks emptiest there. The mesh, not the
// scorers, keeps them apart: router/meshstate orders the first picks of an
// instant by router rank, so each router picks after the lower-ranked
// routers' picks of that instant are in its QueuedPrefill. (A per-router
// "home share" of the targets did this here before; with the order it
// cost hit rate and queueing, BENCHMARKS.md §1.)
