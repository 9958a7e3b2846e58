package strategies

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

// ErrUnknownStrategy is returned by Build for a name not in the registry.
var ErrUnknownStrategy = errors.New("unknown strategy")

// Target describes one entry of a route's target list as a strategy sees it.
type Target struct {
	// ID identifies the target across config snapshots (provider name and
	// upstream model); the Tracker keys learned state by it.
	ID string
	// Provider is the provider's name.
	Provider string
	// UpstreamModel is the model name forwarded upstream.
	UpstreamModel string
	// Weight is the configured integer weight (≥ 1). Only the strategies
	// for which UsesWeights is true read it.
	Weight int
	// CostInPerMtok and CostOutPerMtok are catalog prices per million tokens.
	CostInPerMtok, CostOutPerMtok float64
}

// Rand is the randomness a strategy draws from. It is injected so tests
// can script it; implementations must be safe for concurrent use.
type Rand interface {
	// IntN returns a uniform int in [0, n). n > 0.
	IntN(n int) int
	// Float64 returns a uniform float in [0, 1).
	Float64() float64
}

// Clock is the time source a strategy reads (session TTLs, sample ages).
type Clock interface{ Now() time.Time }

// Spec is everything Build needs to construct one balancer for one pool of
// targets. Zero-valued optional fields mean "not available": a strategy then
// behaves neutrally on that signal.
type Spec struct {
	Targets []Target
	Rand    Rand
	Clock   Clock
	// Stats holds the learned per-target state, index-aligned with Targets;
	// Build fills it from Tracker when nil.
	Stats   []*TargetStats
	Tracker *Tracker
	// External state sources, index-aligned with Targets (see external.go).
	// A Residency that also implements ResidencyBatch is asked once per
	// pick for every target, which precise_cache_aware needs to stay
	// within its latency budget on long prompts.
	Residency Residency
	Cache     CacheSignal
	Adapters  AdapterResidency
	// Policy is the deployment-wide adaptive routing policy; adaptive reads
	// it on every pick so a policy change needs no rebuild.
	Policy *PolicyHolder
	// MaxLoRAs sizes lora_aware's per-target adapter LRU (vLLM --max-loras);
	// 0 means DefaultMaxLoRAs.
	MaxLoRAs int
	// PrefixCacheBytes bounds, per target, how many prompt bytes the
	// prefix index of cache_aware and of the pipeline stacks remembers;
	// 0 means DefaultPrefixBytes.
	PrefixCacheBytes int
}

type factory func(Spec) (LoadBalancer, error)

// registry is the explicit list of strategies; there is no init()-time
// registration.
var registry = map[string]factory{
	"round_robin":         newRoundRobin,
	"random":              newRandom,
	"power_of_two":        newPowerOfTwo,
	"consistent_hash":     newConsistentHash,
	"cache_aware":         newCacheAware,
	"weighted":            newWeighted,
	"pipeline":            newPipelineStrategy,
	"cheapest":            newCheapest,
	"fastest":             newFastest,
	"precise_cache_aware": newPreciseCacheAware,
	"lmcache_aware":       newLMCacheAware,
	"adaptive":            newAdaptive,
	"lora_aware":          newLoRAAware,
	"predicted_latency":   newPredictedLatency,
}

// weightReaders are the strategies that read Target.Weight.
var weightReaders = map[string]bool{"weighted": true, "pipeline": true, "adaptive": true}

// UsesWeights reports whether strategy name reads its targets' weights; for
// every other strategy a configured weight is stored and never consulted.
func UsesWeights(name string) bool { return weightReaders[name] }

// promptBlind are the strategies that never read RouteContext.Prompt, in
// a pick or in Observe. A strategy missing here is taken to read it.
var promptBlind = map[string]bool{"round_robin": true, "random": true, "power_of_two": true, "weighted": true,
	"cheapest": true, "fastest": true, "precise_cache_aware": true, "lmcache_aware": true, "predicted_latency": true}

// ReadsPrompt reports whether strategy name reads RouteContext.Prompt:
// for the others the router may leave it empty and not copy out the
// conversation's text (up to MaxPromptBytes) for every request.
func ReadsPrompt(name string) bool { return !promptBlind[name] }

// digestReaders are the strategies that read RouteContext.PromptDigest.
var digestReaders = map[string]bool{"consistent_hash": true}

// ReadsPromptDigest reports whether strategy name reads
// RouteContext.PromptDigest: for the others the router leaves it 0 and
// does not hash a long prompt's whole text for it.
func ReadsPromptDigest(name string) bool { return digestReaders[name] }

// loadBlind are the strategies whose picks read neither loads nor
// RouteContext.QueuedPrefill. A strategy missing here is taken to read
// them.
var loadBlind = map[string]bool{"round_robin": true, "random": true, "weighted": true, "consistent_hash": true}

// ReadsLoads reports whether strategy name's picks read the loads slice or
// RouteContext.QueuedPrefill: for the others the router need not gather
// every target's load before each pick (it passes the slice, stale but for
// the targets it read, and leaves QueuedPrefill as it was).
func ReadsLoads(name string) bool { return !loadBlind[name] }

// Names lists the registered strategy names, sorted.
func Names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Known reports whether name is a registered strategy.
func Known(name string) bool { _, ok := registry[name]; return ok }

// Build constructs the balancer named name over spec.Targets. It is called
// when a route's or provider group's pool is new or changed in a config
// snapshot (an unchanged pool keeps its balancer), never per request.
func Build(name string, spec Spec) (LoadBalancer, error) {
	f, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownStrategy, name)
	}
	if len(spec.Targets) == 0 {
		return nil, errors.New("strategies: a pool needs at least one target")
	}
	if spec.Clock == nil {
		spec.Clock = systemClock{}
	}
	if spec.Rand == nil {
		spec.Rand = NewRand(uint64(spec.Clock.Now().UnixNano()))
	}
	if spec.Tracker == nil {
		spec.Tracker = NewTracker()
	}
	if spec.Stats == nil {
		spec.Stats = make([]*TargetStats, len(spec.Targets))
		for i, t := range spec.Targets {
			spec.Stats[i] = spec.Tracker.Target(t.ID)
		}
	}
	return f(spec)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
