package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/strategies"
)

// FieldError is one validation failure, naming where it is.
type FieldError struct {
	File  string // base name of the config file ("" for API input)
	Entry string // e.g. `routes[2] (model "llama")`; "" for a whole section
	Field string // e.g. "strategy"
	Msg   string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File + ": ")
	}
	if e.Entry != "" {
		b.WriteString(e.Entry + ": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrInvalid wraps every validation failure.
var ErrInvalid = errors.New("invalid configuration")

// Load reads, defaults and validates the TOML file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(filepath.Base(path), data, os.Getenv)
}

// unknownKeys is an error for every key of md nothing decoded (compat
// keys aside), naming the array entry it sits in: "providers[1]", field
// "bogus", rather than "providers.bogus", which does not say which one.
func unknownKeys(file string, md toml.MetaData) []error {
	unknown := map[string]bool{}
	for _, k := range md.Undecoded() {
		if !isCompatKey(k) {
			unknown[k.String()] = true
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	var errs []error
	entries := map[string]int{} // [[table]] headers met so far, by table
	for _, k := range md.Keys() {
		if len(k) == 1 && md.Type(k...) == "ArrayHash" {
			entries[k[0]]++
			continue
		}
		if !unknown[k.String()] {
			continue
		}
		e := &FieldError{File: file, Field: k.String(), Msg: "unknown key"}
		if n := entries[k[0]]; n > 0 && len(k) > 1 {
			e.Entry, e.Field = fmt.Sprintf("%s[%d]", k[0], n-1), strings.Join(k[1:], ".")
		}
		errs = append(errs, e)
	}
	return errs
}

// Parse decodes data (named file in errors), applies defaults and
// validates. getenv resolves api_key_env and secret_env references.
func Parse(file string, data []byte, getenv func(string) string) (*Config, error) {
	cfg := Default()
	md, err := toml.Decode(string(data), &cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, file, err)
	}
	if errs := unknownKeys(file, md); len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	errs := applyCompat(file, data, &cfg)
	// A declared [admission] is owned by the file (read-only in the admin
	// API, synced like the declared entries).
	cfg.Admission.ReadOnly = md.IsDefined("admission")
	if md.IsDefined("metrics_scrape") && !md.IsDefined("metrics_scrape", "enabled") {
		cfg.MetricsScrape.Enabled = true
	}
	errs = append(errs, cfg.check(file, getenv, explicitWeights(data))...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return &cfg, nil
}

// weightAt names one target of the file: list is "routes" or
// "provider_groups", i the entry, j the target or member.
type weightAt struct {
	list string
	i, j int
}

// explicitWeights returns the targets and members whose weight the file
// sets, so a weight written as 0 is rejected while an omitted one defaults
// to 1. data has already decoded once, so errors cannot occur here.
func explicitWeights(data []byte) map[weightAt]bool {
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		return nil
	}
	out := map[weightAt]bool{}
	for _, l := range []struct{ list, members string }{{"routes", "targets"}, {"provider_groups", "members"}} {
		for i, e := range tables(raw[l.list]) {
			for j, t := range tables(e[l.members]) {
				if _, ok := t["weight"]; ok {
					out[weightAt{l.list, i, j}] = true
				}
			}
		}
	}
	return out
}

// tables returns v as a list of tables (an array of tables or an array of
// inline tables), nil when it is neither.
func tables(v any) []map[string]any {
	switch x := v.(type) {
	case []map[string]any:
		return x
	case []any:
		out := make([]map[string]any, 0, len(x))
		for _, e := range x {
			m, _ := e.(map[string]any)
			out = append(out, m)
		}
		return out
	}
	return nil
}

// check fills per-entry defaults and validates the whole config,
// returning each failure. explicit names the weights the file wrote out: a
// 0 there is an error, a missing weight is 1.
func (c *Config) check(file string, getenv func(string) string, explicit map[weightAt]bool) []error {
	v := &validator{file: file}
	if c.Generation < 0 {
		v.add("", "generation", "must be an integer ≥ 0")
	}
	providers := map[string]bool{}
	for i := range c.Providers {
		p := &c.Providers[i]
		entry := fmt.Sprintf("providers[%d] (name %q)", i, p.Name)
		if p.Name == "" {
			v.add(entry, "name", "required")
		} else if providers[p.Name] {
			v.add(entry, "name", "duplicate provider name")
		}
		providers[p.Name] = true
		if err := c.Limits.CheckBaseURL(p.APIBase); err != nil {
			v.add(entry, "api_base", err.Error())
		}
		if f, err := CheckPrices(p.PriceInPerMtok, p.PriceOutPerMtok); err != nil {
			v.add(entry, f, err.Error())
		}
		if p.APIKeyEnv != "" && getenv(p.APIKeyEnv) == "" {
			v.add(entry, "api_key_env", fmt.Sprintf("environment variable %s is empty or unset", p.APIKeyEnv))
		}
		if l := p.LMCache; l != nil {
			if err := c.Limits.CheckBaseURL(l.URL); err != nil {
				v.add(entry, "lmcache.url", err.Error())
			}
			if l.Interval.Duration == 0 {
				l.Interval = d(time.Second)
			} else if l.Interval.Duration < 0 {
				v.add(entry, "lmcache.interval", "must be a positive duration")
			}
			if l.CapacityBytes == 0 {
				l.CapacityBytes = 5 << 30
			} else if l.CapacityBytes < 0 {
				v.add(entry, "lmcache.capacity_bytes", "must be > 0")
			}
		}
	}
	models := map[string]bool{}
	for i := range c.Routes {
		r := &c.Routes[i]
		entry := fmt.Sprintf("routes[%d] (model %q)", i, r.Model)
		if r.Model == "" {
			v.add(entry, "model", "required")
		} else if models[r.Model] {
			v.add(entry, "model", "duplicate route for this model")
		}
		models[r.Model] = true
		if r.Strategy == "" {
			r.Strategy = "round_robin"
		}
		if r.IsEnabled() {
			r.Enabled = nil // one spelling of the default
		}
		v.strategy(entry, r.Strategy)
		if err := CheckMaxLoRAs(r.MaxLoRAs); err != nil {
			v.add(entry, "max_loras", err.Error())
		}
		if len(r.Targets) == 0 && !r.Discover {
			v.add(entry, "targets", "at least one target is required (or set discover = true)")
		}
		for j := range r.Targets {
			t := &r.Targets[j]
			if t.Model == "" {
				t.Model = r.Model
			}
			v.target(fmt.Sprintf("%s targets[%d]", entry, j), t, providers, explicit[weightAt{"routes", i, j}])
		}
	}
	slugs := map[string]bool{}
	for i := range c.ProviderGroups {
		g := &c.ProviderGroups[i]
		entry := fmt.Sprintf("provider_groups[%d] (name %q)", i, g.Name)
		if g.Name == "" {
			v.add(entry, "name", "required")
		}
		switch {
		case g.Slug == "":
			v.add(entry, "slug", "required")
		case strings.ContainsAny(g.Slug, "/ \t"):
			v.add(entry, "slug", "must not contain '/' or spaces")
		case slugs[g.Slug]:
			v.add(entry, "slug", "duplicate slug")
		case providers[g.Slug]:
			v.add(entry, "slug", fmt.Sprintf("collides with provider %q: %q/model would be ambiguous", g.Slug, g.Slug))
		}
		slugs[g.Slug] = true
		if g.Strategy == "" {
			g.Strategy = "round_robin"
		}
		if g.IsEnabled() {
			g.Enabled = nil
		}
		v.strategy(entry, g.Strategy)
		if err := CheckMaxLoRAs(g.MaxLoRAs); err != nil {
			v.add(entry, "max_loras", err.Error())
		}
		if len(g.Members) == 0 {
			v.add(entry, "members", "at least one member is required")
		}
		for j := range g.Members {
			v.target(fmt.Sprintf("%s members[%d]", entry, j), &g.Members[j], providers, explicit[weightAt{"provider_groups", i, j}])
		}
	}
	catalog := map[string]bool{}
	for i, m := range c.Models {
		entry := fmt.Sprintf("models[%d] (model %q)", i, m.Model)
		if m.Model == "" {
			v.add(entry, "model", "required")
		} else if catalog[m.Model] {
			v.add(entry, "model", "duplicate catalog entry for this model")
		}
		catalog[m.Model] = true
		if f, err := CheckPrices(m.PriceInPerMtok, m.PriceOutPerMtok); err != nil {
			v.add(entry, f, err.Error())
		}
	}
	if err := ValidatePolicy(c.AdaptiveRouting.Policy()); err != nil {
		v.add("adaptive_routing", "", err.Error())
	}
	c.validateTuning(v)
	keys := map[string]bool{}
	for i := range c.Keys {
		k := &c.Keys[i]
		entry := fmt.Sprintf("keys[%d] (name %q)", i, k.Name)
		if k.Name == "" {
			v.add(entry, "name", "required")
		} else if keys[k.Name] {
			v.add(entry, "name", "duplicate key name")
		}
		keys[k.Name] = true
		if !ValidPriority(k.MaxPriority) {
			v.add(entry, "max_priority", "must be critical, standard or sheddable")
		}
		for j, p := range k.Providers {
			if !providers[p] {
				v.add(entry, fmt.Sprintf("providers[%d]", j), fmt.Sprintf("no provider named %q", p))
			}
		}
		switch {
		case k.SHA256 != "" && k.SecretEnv != "":
			v.add(entry, "sha256", "set either sha256 or secret_env, not both")
		case k.SecretEnv != "":
			secret := getenv(k.SecretEnv)
			if secret == "" {
				v.add(entry, "secret_env", fmt.Sprintf("environment variable %s is empty or unset", k.SecretEnv))
			} else {
				sum := sha256.Sum256([]byte(secret))
				k.SHA256 = hex.EncodeToString(sum[:])
			}
		case k.SHA256 == "":
			v.add(entry, "sha256", "required (hex SHA-256 of the key) unless secret_env is set")
		default:
			if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != sha256.Size {
				v.add(entry, "sha256", "must be 64 hex characters")
			}
			k.SHA256 = strings.ToLower(k.SHA256)
		}
	}
	return v.errs
}

func (c *Config) validateTuning(v *validator) {
	pos := func(sec, field string, d Duration) {
		if d.Duration <= 0 {
			v.add(sec, field, "must be a positive duration")
		}
	}
	r := c.Retry
	if r.Attempts < 0 || r.Attempts > 10 {
		v.add("retry", "attempts", "must be in [0, 10]")
	}
	pos("retry", "backoff_base", r.BackoffBase)
	pos("retry", "backoff_max", r.BackoffMax)
	pos("retry", "park_min", r.ParkMin)
	pos("retry", "park_max", r.ParkMax)
	if r.ParkMin.Duration > r.ParkMax.Duration {
		v.add("retry", "park_min", "must not exceed park_max")
	}
	if math.IsNaN(r.Budget) || r.Budget < 0 || r.Budget > 1 {
		v.add("retry", "budget", "must be in [0, 1]")
	}
	if r.MaxResumes < 1 || r.MaxResumes > 10 {
		v.add("retry", "max_resumes", "must be in [1, 10]")
	}
	if r.ResumeIdle.Duration < 0 {
		v.add("retry", "resume_idle", "must be a duration ≥ 0 (0: no limit)")
	}
	if c.Breaker.Failures < 1 {
		v.add("breaker", "failures", "must be ≥ 1")
	}
	pos("breaker", "open", c.Breaker.Open)
	h := c.Health
	pos("health", "interval", h.Interval)
	pos("health", "recovery_interval", h.RecoveryInterval)
	pos("health", "timeout", h.Timeout)
	if h.DownAfter < 1 {
		v.add("health", "down_after", "must be ≥ 1")
	}
	if h.UpAfter < 1 {
		v.add("health", "up_after", "must be ≥ 1")
	}
	if !strings.HasPrefix(h.Path, "/") {
		v.add("health", "path", "must start with '/'")
	}
	t := c.Timeouts
	for f, d := range map[string]Duration{"connect": t.Connect, "first_byte": t.FirstByte, "request": t.Request,
		"read_header": t.ReadHeader, "read_body": t.ReadBody, "idle": t.Idle, "drain": t.Drain} {
		pos("timeouts", f, d)
	}
	if c.Limits.MaxBodyBytes <= 0 {
		v.add("limits", "max_body_bytes", "must be > 0")
	}
	if c.Limits.MaxHeaderBytes < 4096 {
		v.add("limits", "max_header_bytes", "must be ≥ 4096")
	}
	if c.Limits.MaxStreamsPerKey < 0 {
		v.add("limits", "max_streams_per_key", "must be ≥ 0")
	}
	if len(c.Limits.AllowedSchemes) == 0 {
		v.add("limits", "allowed_schemes", "must name at least one scheme")
	}
	c.checkObserve(v)
	c.Admission.Check(func(field, msg string) { v.add("admission", field, msg) })
	m := c.MetricsScrape
	pos("metrics_scrape", "interval", m.Interval)
	pos("metrics_scrape", "timeout", m.Timeout)
	pos("metrics_scrape", "stale_after", m.StaleAfter)
	if !strings.HasPrefix(m.Path, "/") {
		v.add("metrics_scrape", "path", "must start with '/'")
	}
}

// CheckBaseURL validates a provider api_base against the allowed schemes
// and hosts; the admin API uses it too, so no provider can point the router
// at an arbitrary address.
func (l Limits) CheckBaseURL(raw string) error {
	if raw == "" {
		return errors.New("required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %q", raw)
	}
	if !slices.Contains(l.AllowedSchemes, u.Scheme) {
		return fmt.Errorf("scheme %q not allowed (allowed: %s)", u.Scheme, strings.Join(l.AllowedSchemes, ", "))
	}
	if u.Host == "" {
		return fmt.Errorf("not an absolute URL: %q", raw)
	}
	if u.User != nil {
		return errors.New("must not carry credentials; use api_key_env")
	}
	if len(l.AllowedHosts) > 0 && !slices.Contains(l.AllowedHosts, u.Hostname()) {
		return fmt.Errorf("host %q not in [limits] allowed_hosts", u.Hostname())
	}
	return nil
}

// CheckPrices validates a pair of per-million-token prices (a provider's
// or a catalog entry's); on failure it returns the offending field. The
// admin API applies the same rule.
func CheckPrices(in, out float64) (field string, err error) {
	for _, p := range []struct {
		f string
		v float64
	}{{"price_in_per_mtok", in}, {"price_out_per_mtok", out}} {
		if math.IsNaN(p.v) || math.IsInf(p.v, 0) || p.v < 0 {
			return p.f, errors.New("must be a finite number ≥ 0")
		}
	}
	return "", nil
}

// CheckMaxLoRAs validates a route's or group's max_loras (0: the default).
// The admin API applies the same rule.
func CheckMaxLoRAs(n int) error {
	if n < 0 || n > 1024 {
		return errors.New("must be in [0, 1024]")
	}
	return nil
}

// ValidatePolicy applies compat.md's rules for the adaptive routing policy.
// They hold whether or not the policy is enabled.
func ValidatePolicy(p adaptive.Policy) error {
	for _, w := range []struct {
		name string
		v    float64
	}{{"latency_weight", p.LatencyWeight}, {"cost_weight", p.CostWeight}, {"load_weight", p.LoadWeight}} {
		if math.IsNaN(w.v) || math.IsInf(w.v, 0) || w.v < 0 || w.v > 100 {
			return fmt.Errorf("%s must be a finite number in [0, 100]", w.name)
		}
	}
	if p.LatencyWeight == 0 && p.CostWeight == 0 && p.LoadWeight == 0 {
		return errors.New("at least one of latency_weight, cost_weight, load_weight must be positive; use enabled = false to stop adaptive routing")
	}
	if math.IsNaN(p.ExplorationRatio) || p.ExplorationRatio < 0 || p.ExplorationRatio > 0.5 {
		return errors.New("exploration_ratio must be in [0, 0.5]")
	}
	if p.MinSamples < 0 || p.MinSamples > 1_000_000 {
		return errors.New("min_samples must be in [0, 1000000]")
	}
	return nil
}

type validator struct {
	file string
	errs []error
}

func (v *validator) add(entry, field, msg string) {
	v.errs = append(v.errs, &FieldError{File: v.file, Entry: entry, Field: field, Msg: msg})
}

func (v *validator) strategy(entry, name string) {
	if err := CheckStrategy(name); err != nil {
		v.add(entry, "strategy", err.Error())
	}
}

// CheckStrategy reports an unknown strategy name, listing the known ones.
func CheckStrategy(name string) error {
	if !strategies.Known(name) {
		return fmt.Errorf("unknown strategy %q (known: %s)", name, strings.Join(strategies.Names(), ", "))
	}
	return nil
}

// target validates one route target or group member. A weight the file
// left out is 1; one it wrote must be an integer ≥ 1 (compat.md), so a 0
// meant to switch a target off is an error rather than a silent 1.
func (v *validator) target(entry string, t *Target, providers map[string]bool, weightSet bool) {
	if t.Provider == "" {
		v.add(entry, "provider", "required")
	} else if !providers[t.Provider] {
		v.add(entry, "provider", fmt.Sprintf("no provider named %q", t.Provider))
	}
	if t.Weight == 0 && !weightSet {
		t.Weight = 1
	}
	if err := CheckWeight(t.Weight); err != nil {
		v.add(entry, "weight", err.Error())
	}
}

// CheckWeight validates a target's weight: an integer ≥ 1. The admin API
// applies the same rule.
func CheckWeight(w int) error {
	if w < 1 {
		return fmt.Errorf("must be an integer ≥ 1, got %d", w)
	}
	return nil
}
