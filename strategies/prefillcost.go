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
	resident := c.ints[:c.n]
	clear(resident)
	if s.res != nil && len(keys) > 0 {
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
	// out holds each candidate's wait until it is turned into a score;
	// least is the request's own prefill where it is cheapest (what a
	// target outside this router's home is charged a share of).
	least := prompt
	for _, t := range cands {
		least = min(least, max(prompt-min(max(resident[t], 0), len(keys))*kvblock.DefaultBlockSize, 0))
	}
	lo := -1.0
	for k, t := range cands {
		own := prompt - min(max(resident[t], 0), len(keys))*kvblock.DefaultBlockSize
		out[k] = float64(q[t]) + float64(max(own, 0)) + awayCost(c, t, float64(least))
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

// Score implements Scorer.
func (w withoutPrefill) Score(c *Cycle, cands []int, out []float64) {
	if prefillDecides(c) {
		return
	}
	w.Scorer.Score(c, cands, out)
}

// Herding across routers. Routers of a mesh see each other's picks only
// after a publish interval and a gossip hop (tens of milliseconds), so
// requests that reach several routers at the same instant (a client's
// batch, a trace replayed in batches) are all placed on one shared picture
// of the fleet, and every router sends its request to the engine that
// looks emptiest there. Nothing a router learns later can undo that; only
// routers that prefer different engines to begin with avoid it. So each
// router of a mesh has a share of the targets, its home, and an engine
// outside it costs a request homePreference of its own prefill more: a
// resident prefix, or a queue shorter by more than that, still wins, but
// among engines that are about equal for the request each router takes its
// own, and a burst spreads over the fleet instead of piling onto the
// engine that looked emptiest. PrefillWait and LeastPrefill{Home: true}
// apply it. Measured in BENCHMARKS.md §1 (with the alternatives tried).

// homePreference is the extra wait, as a fraction of the request's own
// uncached prompt tokens, an engine outside a router's home costs.
const homePreference = 0.5

// HomeShare reports whether target t of n is in the home of router rank
// among routers: targets t ≡ rank (mod routers) when there are at least as
// many targets as routers, else target rank mod n (several routers share
// one). Alone (routers ≤ 1) every target is home.
func HomeShare(t, n, routers, rank int) bool {
	if routers <= 1 || n <= 0 {
		return true
	}
	if routers <= n {
		return t%routers == rank%routers
	}
	return t == rank%n
}

// awayCost is the extra wait target t costs in cycle c for a request
// whose own prefill is own tokens: homePreference·own outside this
// router's home, 0 inside it or when the router routes alone.
func awayCost(c *Cycle, t int, own float64) float64 {
	if c.Ctx.Routers <= 1 || HomeShare(t, c.n, c.Ctx.Routers, c.Ctx.Rank) {
		return 0
	}
	return homePreference * own
}
