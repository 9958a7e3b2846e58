package demo

import (
	"time"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/localfleet"
	"github.com/rolter/rolter/sim"
)

// configHeader is the seed config's leading comment.
const configHeader = "rolter demo: every router syncs the entries below into the replicated state (raise generation to change them)."

// routes are the routes over all four engines, one per strategy.
var routes = []struct{ model, strategy, what string }{
	{"chat", "round_robin", "turns through the engines"},
	{"cache", "cache_aware", "prefers the engine that saw the prompt's prefix (router-side estimate)"},
	{"precise", "precise_cache_aware", "the engine where the prompt waits least: its uncached part (sidecar KV events) + prefill queued there"},
	{"adaptive", "adaptive", "learns latency, cost and load per engine ([adaptive_routing] enabled)"},
}

// Config is the demo's seed config: a provider per engine (at different
// prices, so the adaptive route's cost term has something to weigh), one
// route per strategy worth seeing, the "lora" provider group of
// passthrough members (so "lora/<adapter>" reaches the engine), a
// discover route when sidecars run, the adaptive policy on and broken
// streams resumed on another engine.
func Config(p localfleet.Plan, sidecars bool) *config.Config {
	c := config.Default()
	c.Generation = 1
	var targets, members []config.Target
	for j, e := range p.Engines {
		c.Providers = append(c.Providers, config.Provider{Name: e.ID, APIBase: e.URL(),
			PriceInPerMtok: float64(j+1) / 10, PriceOutPerMtok: 3 * float64(j+1) / 10})
		targets = append(targets, config.Target{Provider: e.ID, Model: sim.DefaultModelName})
		members = append(members, config.Target{Provider: e.ID})
	}
	for _, r := range routes {
		c.Routes = append(c.Routes, config.Route{Model: r.model, Strategy: r.strategy, Targets: targets})
	}
	if sidecars {
		// Targets found over gossip: every engine whose sidecar announces the model.
		c.Routes = append(c.Routes, config.Route{Model: sim.DefaultModelName, Strategy: "power_of_two", Discover: true})
	}
	c.ProviderGroups = []config.ProviderGroup{{Name: "LoRA fleet", Slug: "lora", Strategy: "lora_aware", MaxLoRAs: 2, Members: members}}
	c.AdaptiveRouting = config.AdaptiveRouting{Enabled: true, LatencyWeight: 1.0, CostWeight: 0.5, LoadWeight: 0.25,
		ExplorationRatio: 0.05, MinSamples: 20}
	c.Retry.ResumeStreams = true
	c.Health.Interval = config.Duration{Duration: 2 * time.Second}
	c.Timeouts.Drain = config.Duration{Duration: time.Second}
	return &c
}
