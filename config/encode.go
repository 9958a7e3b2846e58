package config

import (
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/BurntSushi/toml"
)

// file is rolter.toml as Encode writes it: the top-level generation, the
// entry lists, then every section with only the keys that differ from
// Default (nil: the section is left out).
type file struct {
	Generation      int64           `toml:"generation,omitzero"`
	Providers       []encProvider   `toml:"providers,omitempty"`
	Routes          []encRoute      `toml:"routes,omitempty"`
	ProviderGroups  []encGroup      `toml:"provider_groups,omitempty"`
	Models          []encModelPrice `toml:"models,omitempty"`
	Keys            []encKey        `toml:"keys,omitempty"`
	AdaptiveRouting map[string]any  `toml:"adaptive_routing,omitempty"`
	Retry           map[string]any  `toml:"retry,omitempty"`
	Breaker         map[string]any  `toml:"breaker,omitempty"`
	Health          map[string]any  `toml:"health,omitempty"`
	Timeouts        map[string]any  `toml:"timeouts,omitempty"`
	Limits          map[string]any  `toml:"limits,omitempty"`
	MetricsScrape   map[string]any  `toml:"metrics_scrape,omitempty"`
	Tracing         map[string]any  `toml:"tracing,omitempty"`
	Observability   map[string]any  `toml:"observability,omitempty"`
	Admission       map[string]any  `toml:"admission,omitempty"`
}

// The entry types as written: a zero field is left out, so it loads as
// its default (a zero weight as 1, an empty strategy as round_robin).
type encProvider struct {
	Name            string      `toml:"name"`
	APIBase         string      `toml:"api_base"`
	APIKeyEnv       string      `toml:"api_key_env,omitempty"`
	PriceInPerMtok  float64     `toml:"price_in_per_mtok,omitzero"`
	PriceOutPerMtok float64     `toml:"price_out_per_mtok,omitzero"`
	ReadOnly        bool        `toml:"readonly,omitempty"`
	LMCache         *encLMCache `toml:"lmcache,omitempty"`
}

type encLMCache struct {
	URL           string   `toml:"url"`
	Interval      Duration `toml:"interval,omitempty"`
	CapacityBytes int64    `toml:"capacity_bytes,omitzero"`
}

type encTarget struct {
	Provider string `toml:"provider"`
	Model    string `toml:"model,omitempty"`
	Weight   int    `toml:"weight,omitzero"`
}

type encRoute struct {
	Model         string      `toml:"model"`
	Strategy      string      `toml:"strategy,omitempty"`
	Discover      bool        `toml:"discover,omitempty"`
	MaxLoRAs      int         `toml:"max_loras,omitzero"`
	ReadOnly      bool        `toml:"readonly,omitempty"`
	Enabled       *bool       `toml:"enabled,omitempty"`
	ResumeStreams *bool       `toml:"resume_streams,omitempty"`
	Targets       []encTarget `toml:"targets,omitempty"`
}

type encGroup struct {
	Name          string      `toml:"name"`
	Slug          string      `toml:"slug"`
	Strategy      string      `toml:"strategy,omitempty"`
	MaxLoRAs      int         `toml:"max_loras,omitzero"`
	ReadOnly      bool        `toml:"readonly,omitempty"`
	Enabled       *bool       `toml:"enabled,omitempty"`
	ResumeStreams *bool       `toml:"resume_streams,omitempty"`
	Members       []encTarget `toml:"members,omitempty"`
}

type encModelPrice struct {
	Model           string  `toml:"model"`
	PriceInPerMtok  float64 `toml:"price_in_per_mtok,omitzero"`
	PriceOutPerMtok float64 `toml:"price_out_per_mtok,omitzero"`
	ReadOnly        bool    `toml:"readonly,omitempty"`
}

type encKey struct {
	Name      string   `toml:"name"`
	SHA256    string   `toml:"sha256,omitempty"`
	SecretEnv string   `toml:"secret_env,omitempty"`
	Models    []string `toml:"models,omitempty"`
	Providers []string `toml:"providers,omitempty"`
	// MaxPriority and FairnessHeader are the key's admission settings.
	MaxPriority    string `toml:"max_priority,omitempty"`
	FairnessHeader bool   `toml:"fairness_header,omitempty"`
	ReadOnly       bool   `toml:"readonly,omitempty"`
}

func encTargets(ts []Target) []encTarget {
	out := make([]encTarget, 0, len(ts))
	for _, t := range ts {
		out = append(out, encTarget(t))
	}
	return out
}

// Encode writes c as a rolter.toml that Parse reads back to c: the
// entries (a zero field left out, so it loads as its default) and, of
// every section, the keys whose value differs from Default's. A key
// given by secret_env is written by that variable's name, not by the
// digest loading it computed, so the secret stays out of the file. header, when not empty, is written first as
// comment lines.
func Encode(w io.Writer, c *Config, header string) error {
	f := file{Generation: c.Generation}
	for _, p := range c.Providers {
		e := encProvider{Name: p.Name, APIBase: p.APIBase, APIKeyEnv: p.APIKeyEnv, PriceInPerMtok: p.PriceInPerMtok,
			PriceOutPerMtok: p.PriceOutPerMtok, ReadOnly: p.ReadOnly}
		if p.LMCache != nil {
			e.LMCache = &encLMCache{URL: p.LMCache.URL, Interval: p.LMCache.Interval, CapacityBytes: p.LMCache.CapacityBytes}
		}
		f.Providers = append(f.Providers, e)
	}
	for _, r := range c.Routes {
		f.Routes = append(f.Routes, encRoute{Model: r.Model, Strategy: r.Strategy, Discover: r.Discover, MaxLoRAs: r.MaxLoRAs,
			ReadOnly: r.ReadOnly, Enabled: r.Enabled, ResumeStreams: r.ResumeStreams, Targets: encTargets(r.Targets)})
	}
	for _, g := range c.ProviderGroups {
		f.ProviderGroups = append(f.ProviderGroups, encGroup{Name: g.Name, Slug: g.Slug, Strategy: g.Strategy, MaxLoRAs: g.MaxLoRAs,
			ReadOnly: g.ReadOnly, Enabled: g.Enabled, ResumeStreams: g.ResumeStreams, Members: encTargets(g.Members)})
	}
	for _, m := range c.Models {
		f.Models = append(f.Models, encModelPrice(m))
	}
	for _, k := range c.Keys {
		e := encKey(k)
		if e.SecretEnv != "" {
			e.SHA256 = "" // loaded from the variable: it is named again, never hashed in
		}
		f.Keys = append(f.Keys, e)
	}
	def := Default()
	f.AdaptiveRouting = changed(c.AdaptiveRouting, def.AdaptiveRouting)
	f.Retry = changed(c.Retry, def.Retry)
	f.Breaker = changed(c.Breaker, def.Breaker)
	f.Health = changed(c.Health, def.Health)
	f.Timeouts = changed(c.Timeouts, def.Timeouts)
	f.Limits = changed(c.Limits, def.Limits)
	f.MetricsScrape = changed(c.MetricsScrape, def.MetricsScrape)
	if f.MetricsScrape != nil {
		// Writing the section turns it on unless enabled says otherwise.
		f.MetricsScrape["enabled"] = c.MetricsScrape.Enabled
	}
	f.Tracing = changed(c.Tracing, def.Tracing)
	f.Observability = changed(c.Observability, def.Observability)
	f.Admission = changed(c.Admission, def.Admission)
	if c.Admission.ReadOnly && f.Admission == nil {
		// Declared with the defaults: still declared (the file owns it).
		f.Admission = map[string]any{"enabled": c.Admission.Enabled}
	}

	if header != "" {
		for _, l := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
			if _, err := fmt.Fprintf(w, "# %s\n", l); err != nil {
				return err
			}
		}
		if _, err := io.WriteString(w, "\n"); err != nil {
			return err
		}
	}
	enc := toml.NewEncoder(w)
	enc.Indent = ""
	if err := enc.Encode(f); err != nil {
		return fmt.Errorf("config: encoding: %w", err)
	}
	return nil
}

// changed returns the fields of section s (a struct of the Config) whose
// value differs from def's, by TOML key; nil when none does.
func changed[T any](s, def T) map[string]any {
	sv, dv := reflect.ValueOf(s), reflect.ValueOf(def)
	var out map[string]any
	for i := range sv.NumField() {
		name, _, _ := strings.Cut(sv.Type().Field(i).Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		v := sv.Field(i).Interface()
		if reflect.DeepEqual(v, dv.Field(i).Interface()) {
			continue
		}
		if out == nil {
			out = map[string]any{}
		}
		out[name] = v
	}
	return out
}
