// Package config owns rolter.toml: its schema, the defaults compat.md
// fixes, and validation whose errors name the file, the entry and the
// field. Unknown keys are errors, so a typo never silently becomes a
// default.
package config

import (
	"fmt"
	"time"

	"github.com/rolter/rolter/adaptive"
)

// Config is a parsed, defaulted rolter.toml.
type Config struct {
	// Generation is the revision of the entries the file declares
	// (providers, routes, provider groups, keys, models): raise it with every
	// change to them. A router syncs them to the cluster only when its
	// generation is newer than the cluster's, so a router with an older
	// file never rolls a newer one back.
	// It is an integer ≥ 0 (default 0).
	Generation      int64           `toml:"generation"`
	Providers       []Provider      `toml:"providers"`
	Routes          []Route         `toml:"routes"`
	ProviderGroups  []ProviderGroup `toml:"provider_groups"`
	AdaptiveRouting AdaptiveRouting `toml:"adaptive_routing"`
	Retry           Retry           `toml:"retry"`
	Breaker         Breaker         `toml:"breaker"`
	Health          Health          `toml:"health"`
	Timeouts        Timeouts        `toml:"timeouts"`
	Limits          Limits          `toml:"limits"`
	MetricsScrape   MetricsScrape   `toml:"metrics_scrape"`
	Tracing         Tracing         `toml:"tracing"`
	Observability   Observability   `toml:"observability"`
	// Admission is [admission]: the router-side queue used when the fleet
	// is saturated (replicated like the adaptive policy).
	Admission Admission `toml:"admission"`
	Keys      []Key     `toml:"keys"`
	// Models is the model price catalog ([[models]]): what each upstream
	// model costs, whichever provider serves it.
	Models []ModelPrice `toml:"models"`
}

// ModelPrice is one [[models]] entry of the price catalog. cheapest,
// adaptive and provider groups price a target by its upstream model from
// here; a provider's own prices are the fallback for a model the catalog
// does not list.
type ModelPrice struct {
	Model           string  `toml:"model" json:"model"`
	PriceInPerMtok  float64 `toml:"price_in_per_mtok" json:"price_in_per_mtok"`
	PriceOutPerMtok float64 `toml:"price_out_per_mtok" json:"price_out_per_mtok"`
	ReadOnly        bool    `toml:"readonly" json:"readonly"`
}

// Provider is one upstream OpenAI-compatible endpoint (a vLLM engine or an
// API provider).
type Provider struct {
	Name            string  `toml:"name"`
	APIBase         string  `toml:"api_base"`
	APIKeyEnv       string  `toml:"api_key_env"`
	PriceInPerMtok  float64 `toml:"price_in_per_mtok"`
	PriceOutPerMtok float64 `toml:"price_out_per_mtok"`
	// ReadOnly entries cannot be changed through the admin API. Every
	// entry rolter.toml declares is read-only there (the file owns it);
	// the key is accepted for compatibility.
	ReadOnly bool `toml:"readonly"`
	// LMCache is [providers.lmcache]: the router polls the engine's LMCache
	// signal itself (for lmcache_aware without a sidecar). Like [health]
	// it is read from this router's rolter.toml and never replicated: it
	// applies to the provider of that name wherever the provider came from.
	LMCache *LMCache `toml:"lmcache"`
}

// LMCache is a provider's [providers.lmcache] table.
type LMCache struct {
	// URL answers the JSON contract {"occupancy": 0..1, "cache_available":
	// bool} or Prometheus text with lmcache:local_cache_usage (bytes).
	URL string `toml:"url"`
	// Interval is the poll period (default 1s).
	Interval Duration `toml:"interval"`
	// CapacityBytes is the CPU tier size for the gauge form (default
	// 5 GiB, LMCache's max_local_cpu_size default).
	CapacityBytes int64 `toml:"capacity_bytes"`
}

// LMCacheTables returns the providers' [providers.lmcache] tables by
// provider name (providers without one are left out).
func (c *Config) LMCacheTables() map[string]*LMCache {
	out := map[string]*LMCache{}
	for _, p := range c.Providers {
		if p.LMCache != nil {
			out[p.Name] = p.LMCache
		}
	}
	return out
}

// MetricsScrape is the [metrics_scrape] section: the router scrapes every
// provider's /metrics in the background and folds the engine's scheduler
// queue (running + waiting requests) into the load view, for routers that
// run without sidecars. Where a live sidecar reports the same engine, the
// sidecar wins. Writing the section enables it (enabled defaults to true
// then); it is process-local, like [health].
type MetricsScrape struct {
	Enabled  bool     `toml:"enabled"`
	Interval Duration `toml:"interval"`
	Timeout  Duration `toml:"timeout"`
	// Path is appended to the provider's api_base with any /v1 suffix
	// removed (default /metrics).
	Path string `toml:"path"`
	// StaleAfter: a scrape older than this is ignored (the load view falls
	// back to the router's own in-flight count).
	StaleAfter Duration `toml:"stale_after"`
}

// Target is one member of a route: a provider and the model forwarded to it.
type Target struct {
	Provider string `toml:"provider" json:"provider"`
	Model    string `toml:"model" json:"model"`
	Weight   int    `toml:"weight" json:"weight"`
}

// Route maps a public model name to targets and a strategy.
type Route struct {
	Model    string   `toml:"model"`
	Strategy string   `toml:"strategy"`
	Targets  []Target `toml:"targets"`
	// Discover selects targets by model from the mesh instead of listing
	// them (engines whose sidecars announce Model).
	Discover bool `toml:"discover"`
	// MaxLoRAs sizes lora_aware's per-target adapter set; it should match
	// the engines' --max-loras (vLLM's default is 1). 0 means that default.
	MaxLoRAs int  `toml:"max_loras"`
	ReadOnly bool `toml:"readonly"`
	// Enabled is nil or true for a route that serves; a disabled route
	// answers 404 as an unknown model does. See IsEnabled.
	Enabled *bool `toml:"enabled"`
	// ResumeStreams continues a stream whose engine broke after the first
	// byte on another engine (docs/streaming.md); nil inherits
	// [retry] resume_streams.
	ResumeStreams *bool `toml:"resume_streams"`
}

// IsEnabled reports whether the route serves (enabled is unset or true).
func (r Route) IsEnabled() bool { return r.Enabled == nil || *r.Enabled }

// ProviderGroup is addressed as "slug/model": a pool of providers that all
// serve whatever model the caller names (passthrough members, Model empty)
// or a declared upstream model.
type ProviderGroup struct {
	Name     string   `toml:"name"`
	Slug     string   `toml:"slug"`
	Strategy string   `toml:"strategy"`
	Members  []Target `toml:"members"`
	// MaxLoRAs: as Route.MaxLoRAs.
	MaxLoRAs int  `toml:"max_loras"`
	ReadOnly bool `toml:"readonly"`
	// Enabled: as Route.Enabled.
	Enabled *bool `toml:"enabled"`
	// ResumeStreams: as Route.ResumeStreams.
	ResumeStreams *bool `toml:"resume_streams"`
}

// IsEnabled reports whether the group serves (enabled is unset or true).
func (g ProviderGroup) IsEnabled() bool { return g.Enabled == nil || *g.Enabled }

// Bool returns a pointer to v, for the optional boolean fields.
func Bool(v bool) *bool { return &v }

// AdaptiveRouting is the [adaptive_routing] policy.
type AdaptiveRouting struct {
	Enabled          bool    `toml:"enabled"`
	LatencyWeight    float64 `toml:"latency_weight"`
	CostWeight       float64 `toml:"cost_weight"`
	LoadWeight       float64 `toml:"load_weight"`
	ExplorationRatio float64 `toml:"exploration_ratio"`
	MinSamples       int     `toml:"min_samples"`
}

// Policy converts the section to the strategies' policy type.
func (a AdaptiveRouting) Policy() adaptive.Policy {
	return adaptive.Policy{
		Enabled: a.Enabled, LatencyWeight: a.LatencyWeight, CostWeight: a.CostWeight,
		LoadWeight: a.LoadWeight, ExplorationRatio: a.ExplorationRatio, MinSamples: a.MinSamples,
	}
}

// Retry is the [retry] section: attempts beyond the first, full-jitter
// backoff in [0, min(base·2^(n-1), max)], and the clamp applied to a 429's
// Retry-After when parking a target.
type Retry struct {
	Attempts    int      `toml:"attempts"`
	BackoffBase Duration `toml:"backoff_base"`
	BackoffMax  Duration `toml:"backoff_max"`
	ParkMin     Duration `toml:"park_min"`
	ParkMax     Duration `toml:"park_max"`
	// Budget caps retries as a fraction of recent first attempts so an
	// outage of every target does not become a retry storm.
	Budget float64 `toml:"budget"`
	// ResumeStreams is the default of routes' and provider groups'
	// resume_streams, and the setting of provider pins ("provider/model").
	ResumeStreams bool `toml:"resume_streams"`
	// MaxResumes bounds how many times one stream is continued on
	// another engine.
	MaxResumes int `toml:"max_resumes"`
	// ResumeIdle, when positive, makes a resumable stream whose engine
	// sends nothing for that long count as broken (0: wait).
	ResumeIdle Duration `toml:"resume_idle"`
}

// Resumes reports whether a route or group whose resume_streams is set
// (nil: not set) continues broken streams.
func (r Retry) Resumes(set *bool) bool {
	if set != nil {
		return *set
	}
	return r.ResumeStreams
}

// Breaker is the [breaker] section.
type Breaker struct {
	Failures int      `toml:"failures"`
	Open     Duration `toml:"open"`
}

// Health is the [health] section: active probes per provider.
type Health struct {
	Enabled  bool     `toml:"enabled"`
	Interval Duration `toml:"interval"`
	// RecoveryInterval is the probe cadence while a provider is unhealthy
	// or its breaker is open (when shorter than Interval): a successful
	// probe ends an open breaker's open period at once, so recovery is
	// noticed within about this long instead of [breaker] open.
	RecoveryInterval Duration `toml:"recovery_interval"`
	Timeout          Duration `toml:"timeout"`
	Path             string   `toml:"path"`
	DownAfter        int      `toml:"down_after"`
	UpAfter          int      `toml:"up_after"`
}

// Timeouts is the [timeouts] section.
type Timeouts struct {
	Connect    Duration `toml:"connect"`
	FirstByte  Duration `toml:"first_byte"`
	Request    Duration `toml:"request"`
	ReadHeader Duration `toml:"read_header"`
	ReadBody   Duration `toml:"read_body"`
	Idle       Duration `toml:"idle"`
	Drain      Duration `toml:"drain"`
}

// Limits is the [limits] section.
type Limits struct {
	MaxBodyBytes   int64 `toml:"max_body_bytes"`
	MaxHeaderBytes int   `toml:"max_header_bytes"`
	// MaxStreamsPerKey caps concurrent streaming requests per API key
	// (0: unlimited).
	MaxStreamsPerKey int `toml:"max_streams_per_key"`
	// AllowedSchemes limits provider api_base schemes (default http, https).
	AllowedSchemes []string `toml:"allowed_schemes"`
	// AllowedHosts, when set, limits provider api_base hosts.
	AllowedHosts []string `toml:"allowed_hosts"`
}

// Key is a client API key. Only its SHA-256 is kept: give the hex digest
// in sha256, or name an environment variable holding the secret in
// secret_env (hashed at load, the secret then discarded).
type Key struct {
	Name      string   `toml:"name"`
	SHA256    string   `toml:"sha256"`
	SecretEnv string   `toml:"secret_env"`
	Models    []string `toml:"models"`
	// Providers, when set, are the only providers the key's requests may
	// land on: targets on any other provider are ineligible for it.
	Providers []string `toml:"providers"`
	// MaxPriority is the highest band the key's requests may ask for with
	// x-rolter-priority (critical, standard, sheddable; default standard).
	MaxPriority string `toml:"max_priority"`
	// FairnessHeader lets the key's requests name their fairness flow with
	// x-rolter-fairness-id (default false: the flow is the key).
	FairnessHeader bool `toml:"fairness_header"`
	ReadOnly       bool `toml:"readonly"`
}

// Duration is a time.Duration written as a Go duration string ("250ms").
type Duration struct{ time.Duration }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("not a duration (use e.g. \"500ms\", \"10s\"): %q", b)
	}
	d.Duration = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Default returns the configuration used for everything rolter.toml leaves
// unset (compat.md).
func Default() Config {
	p := adaptive.DefaultPolicy()
	return Config{
		AdaptiveRouting: AdaptiveRouting{Enabled: p.Enabled, LatencyWeight: p.LatencyWeight, CostWeight: p.CostWeight,
			LoadWeight: p.LoadWeight, ExplorationRatio: p.ExplorationRatio, MinSamples: p.MinSamples},
		Retry: Retry{Attempts: 2, BackoffBase: d(100 * time.Millisecond), BackoffMax: d(2 * time.Second),
			ParkMin: d(5 * time.Second), ParkMax: d(300 * time.Second), Budget: 0.2, MaxResumes: 1},
		Breaker: Breaker{Failures: 5, Open: d(30 * time.Second)},
		Health: Health{Enabled: true, Interval: d(10 * time.Second), RecoveryInterval: d(2 * time.Second), Timeout: d(2 * time.Second),
			Path: "/v1/models", DownAfter: 3, UpAfter: 2},
		Timeouts: Timeouts{Connect: d(5 * time.Second), FirstByte: d(120 * time.Second), Request: d(30 * time.Minute),
			ReadHeader: d(10 * time.Second), ReadBody: d(60 * time.Second), Idle: d(120 * time.Second), Drain: d(30 * time.Second)},
		Limits: Limits{MaxBodyBytes: 32 << 20, MaxHeaderBytes: 64 << 10, AllowedSchemes: []string{"http", "https"}},
		MetricsScrape: MetricsScrape{Interval: d(time.Second), Timeout: d(500 * time.Millisecond), Path: "/metrics",
			StaleAfter: d(5 * time.Second)},
		Tracing:       defaultTracing(),
		Observability: defaultObservability(),
		Admission:     DefaultAdmission(),
	}
}

func d(v time.Duration) Duration { return Duration{v} }
