package demo

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/rolter/rolter/config"
)

// seedConfig writes the demo's config as the demo does and parses it back.
func seedConfig(t *testing.T, sidecars bool) *config.Config {
	t.Helper()
	var b bytes.Buffer
	if err := config.Encode(&b, Config(Plan(20000), sidecars), configHeader); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("rolter.toml", b.Bytes(), func(string) string { return "" })
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	return cfg
}

func TestConfigResumesBrokenStreams(t *testing.T) {
	cfg := seedConfig(t, true)
	for _, r := range cfg.Routes {
		if !cfg.Retry.Resumes(r.ResumeStreams) {
			t.Errorf("demo route %s does not resume broken streams", r.Model)
		}
	}
}

func TestConfigServesEveryStrategyOverEveryEngine(t *testing.T) {
	cfg := seedConfig(t, true)
	if len(cfg.Providers) != Engines {
		t.Fatalf("%d providers, want one per engine (%d)", len(cfg.Providers), Engines)
	}
	for _, p := range cfg.Providers {
		// The file a user opens reads "0.3", not 0.30000000000000004.
		for _, v := range []float64{p.PriceInPerMtok, p.PriceOutPerMtok} {
			if s := strconv.FormatFloat(v, 'f', -1, 64); v <= 0 || len(s) > 4 {
				t.Errorf("provider %s price %s", p.Name, s)
			}
		}
	}
	byModel := map[string]config.Route{}
	for _, r := range cfg.Routes {
		byModel[r.Model] = r
	}
	for _, want := range routes {
		r, ok := byModel[want.model]
		if !ok || r.Strategy != want.strategy || len(r.Targets) != Engines {
			t.Errorf("route %s: %+v, want strategy %s over %d engines", want.model, r, want.strategy, Engines)
		}
	}
	if g := cfg.ProviderGroups; len(g) != 1 || g[0].Slug != "lora" || g[0].Strategy != "lora_aware" || g[0].MaxLoRAs != 2 {
		t.Errorf("provider groups: %+v", g)
	}
	if !cfg.AdaptiveRouting.Enabled || cfg.AdaptiveRouting.MinSamples != 20 {
		t.Errorf("adaptive routing: %+v", cfg.AdaptiveRouting)
	}
	discovers := func(c *config.Config) bool {
		for _, r := range c.Routes {
			if r.Discover {
				return true
			}
		}
		return false
	}
	if !discovers(cfg) || discovers(seedConfig(t, false)) {
		t.Error("the discover route must exist exactly when sidecars run")
	}
}
