package strategies

// The strategies below are pipeline stacks: eligibility filter → weighted
// scorers → argmax with random ties (MaxScorePicker). Each total is
// Σ weight · score with every score clamped to [0, 1].

// Scorer weights of the stacks (compat.md; lora_aware's residency weight
// exceeds the sum of the rest so a resident target always outranks a cold
// one).
const (
	loadBehindWeight  = 0.25 // least load behind a primary signal
	loraResidentScore = 3.0
)

// DefaultPipeline builds pipeline's stack over spec:
//
//	total_i = 1.0·session_i + 1.0·weight_i/max weight + 1.0·(1 − load_i/max load) + 1.0·prefix_i
//
// session_i is 1 for the target that last served the x-session-id within
// SessionTTL; prefix_i is the fraction of leading prompt bytes target i is
// remembered to hold. load_i is the prefill work queued on i when the
// router supplies RouteContext.QueuedPrefill, else its request load
// (LeastPrefill). Inputs: SessionKey, Prompt, QueuedPrefill or loads,
// Target.Weight, Spec.Clock, Spec.Rand. It is also adaptive's fallback stack.
func DefaultPipeline(name string, s Spec) *Pipeline {
	n := len(s.Targets)
	w := StaticWeight{weights: make([]float64, n)}
	for i, t := range s.Targets {
		w.weights[i] = float64(max(t.Weight, 1))
	}
	return NewPipeline(name, n, nil, []WeightedScorer{
		{NewSessionAffinity(s.Clock, SessionTTL), 1},
		{w, 1},
		{LeastPrefill{}, 1},
		{NewPrefixAffinity(n, s.PrefixCacheBytes), 1},
	}, MaxScorePicker{s.Rand})
}

func newPipelineStrategy(s Spec) (LoadBalancer, error) { return DefaultPipeline("pipeline", s), nil }

// newCheapest builds cheapest: total_i = 1.0·cost_i + 0.25·(1 − load_i/max
// load), cost_i = min price / price_i (CostScore). Inputs: catalog prices,
// loads.
func newCheapest(s Spec) (LoadBalancer, error) {
	return NewPipeline("cheapest", len(s.Targets), nil, []WeightedScorer{
		{newCostScore(s.Targets), 1},
		{LeastLoad{}, loadBehindWeight},
	}, MaxScorePicker{s.Rand}), nil
}

// newFastest builds fastest: total_i = 1.0·latency_i + 0.25·(1 − load_i/max
// load), latency_i = min cost / cost_i with cost_i = EWMA_i·(1 + this
// router's in-flight on i) (LatencyScore; unsampled targets score 1).
// Inputs: TargetStats.LatencyEWMA and InFlight, loads.
func newFastest(s Spec) (LoadBalancer, error) {
	return NewPipeline("fastest", len(s.Targets), nil, []WeightedScorer{
		{LatencyScore{s.Stats}, 1},
		{LeastLoad{}, loadBehindWeight},
	}, MaxScorePicker{s.Rand}), nil
}

// newPreciseCacheAware builds precise_cache_aware. When the router supplies
// RouteContext.QueuedPrefill it picks the target where this request waits
// least for its first token (PrefillWait): the prompt tokens queued for
// prefill there plus this request's own uncached tokens (prompt − the
// resident prefix of BlockKeys), targets within one KV block of the best
// tied and drawn at random. Time to first token is driven by the
// prefill tokens ahead of a request, not by how many requests are queued:
// one 30k-token prompt delays the next request as much as thirty 1k-token
// ones. Without the signal, and for a request addressing a LoRA adapter
// (see PrefillWait): total_i = 1.0·resident_i/len(BlockKeys) + 0.25·(1 −
// load_i/max load) (PreciseResidency; unknown views score 0, so load
// decides), load in queued prefill tokens when supplied (LeastPrefill).
// Inputs: Adapter, BlockKeys, PromptTokens, Spec.Residency, QueuedPrefill
// or loads.
func newPreciseCacheAware(s Spec) (LoadBalancer, error) {
	return NewPipeline("precise_cache_aware", len(s.Targets), nil, []WeightedScorer{
		{PrefillWait{res: s.Residency, Slack: prefillSlack}, 1},
		{withoutPrefill{PreciseResidency{s.Residency}}, 1},
		{withoutPrefill{LeastPrefill{}}, loadBehindWeight},
	}, MaxScorePicker{s.Rand}), nil
}

// newLMCacheAware builds lmcache_aware: total_i = 1.0·(1 − occupancy_i) +
// 0.25·(1 − load_i/max load) (CacheCapacity; empty, saturated, failed and
// stale caches score 0). Inputs: Spec.Cache, loads.
func newLMCacheAware(s Spec) (LoadBalancer, error) {
	return NewPipeline("lmcache_aware", len(s.Targets), nil, []WeightedScorer{
		{CacheCapacity{s.Cache}, 1},
		{LeastLoad{}, loadBehindWeight},
	}, MaxScorePicker{s.Rand}), nil
}

// newLoRAAware builds lora_aware: total_i = 3.0·resident_i + 1.0·prefix_i +
// 1.0·(1 − load_i/max load). resident_i ∈ {0, 1} (LoRAResidency) weighs
// more than the other two together, so residency outranks prefix affinity
// and load; load stays in the sum so a fleet where every target holds the
// adapter still balances. Inputs: Adapter, Prompt, loads, Spec.Adapters,
// Spec.MaxLoRAs.
func newLoRAAware(s Spec) (LoadBalancer, error) {
	n := len(s.Targets)
	return NewPipeline("lora_aware", n, nil, []WeightedScorer{
		{NewLoRAResidency(n, s.MaxLoRAs, s.Adapters), loraResidentScore},
		{NewPrefixAffinity(n, s.PrefixCacheBytes), 1},
		{LeastLoad{}, 1},
	}, MaxScorePicker{s.Rand}), nil
}

// newPredictedLatency builds predicted_latency: total_i =
// 1.0·min pred / pred_i + 0.25·(1 − load_i/max load) (load_i measured in
// queued prefill tokens when the router supplies them, LeastPrefill),
// pred_i = w0 +
// w1·queue_depth_i + w2·prompt_ktokens from target i's NLMS model
// (PredictedLatency; a target below 8 successes scores the mean of the
// predicted ones, and a route with no prediction is a least-load pipeline).
// Inputs: loads, PromptTokens, TargetStats.
func newPredictedLatency(s Spec) (LoadBalancer, error) {
	return NewPipeline("predicted_latency", len(s.Targets), nil, []WeightedScorer{
		{PredictedLatency{s.Stats}, 1},
		{LeastPrefill{}, loadBehindWeight},
	}, MaxScorePicker{s.Rand}), nil
}
