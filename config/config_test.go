package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

const good = `
[[providers]]
name = "vllm-a"
api_base = "http://127.0.0.1:8000"
price_in_per_mtok = 0.2

[[providers]]
name = "vllm-b"
api_base = "http://127.0.0.1:8001"

[[routes]]
model = "llama"
strategy = "round_robin"
targets = [{provider = "vllm-a", model = "meta-llama/Llama-3.1-8B"}, {provider = "vllm-b", weight = 3}]

[[provider_groups]]
name = "fleet"
slug = "fleet"
members = [{provider = "vllm-a"}, {provider = "vllm-b"}]

[[keys]]
name = "team-a"
secret_env = "TEAM_A_KEY"
models = ["llama"]

[retry]
attempts = 1
`

func TestParseDefaultsAndNormalises(t *testing.T) {
	c, err := Parse("rolter.toml", []byte(good), env(map[string]string{"TEAM_A_KEY": "sk-a"}))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Routes[0]
	if r.Targets[0].Model != "meta-llama/Llama-3.1-8B" || r.Targets[1].Model != "llama" {
		t.Errorf("target models: %+v", r.Targets)
	}
	if r.Targets[0].Weight != 1 || r.Targets[1].Weight != 3 {
		t.Errorf("weights: %+v", r.Targets)
	}
	if c.ProviderGroups[0].Strategy != "round_robin" {
		t.Errorf("group strategy default: %q", c.ProviderGroups[0].Strategy)
	}
	if c.Retry.Attempts != 1 || c.Breaker.Failures != 5 || c.Health.DownAfter != 3 || c.Health.UpAfter != 2 {
		t.Errorf("defaults not merged: %+v %+v %+v", c.Retry, c.Breaker, c.Health)
	}
	if c.Health.Interval.Duration != 10*time.Second || c.Limits.MaxBodyBytes != 32<<20 {
		t.Errorf("defaults: %v %d", c.Health.Interval, c.Limits.MaxBodyBytes)
	}
	if len(c.Keys[0].SHA256) != 64 || strings.Contains(c.Keys[0].SHA256, "sk-a") {
		t.Errorf("key must be stored hashed: %q", c.Keys[0].SHA256)
	}
	p := c.AdaptiveRouting
	if p.Enabled || p.LatencyWeight != 1 || p.CostWeight != 0.5 || p.LoadWeight != 0.25 || p.ExplorationRatio != 0.05 || p.MinSamples != 50 {
		t.Errorf("adaptive defaults: %+v", p)
	}
}

func TestParseErrorsNameFileEntryAndField(t *testing.T) {
	cases := []struct {
		name, toml string
		want       []string
	}{
		{"unknown key", "[retry]\nattempt = 3\n", []string{"rolter.toml", "retry.attempt", "unknown key"}},
		{"unknown key in the third provider", good + "\n[[providers]]\nname = \"b\"\napi_base = \"http://127.0.0.1:9\"\nbogus = 1\n",
			[]string{"rolter.toml: providers[2]: bogus: unknown key"}},
		{"unknown key in a provider's sub-table", good + "\n[providers.lmcache]\nurl = \"http://127.0.0.1:9\"\ncapcity = 1\n",
			[]string{"rolter.toml: providers[1]: lmcache.capcity: unknown key"}},
		{"unknown strategy", good + "\n[[routes]]\nmodel = \"x\"\nstrategy = \"fastest_ever\"\ntargets = [{provider = \"vllm-a\"}]\n",
			[]string{`routes[1] (model "x")`, "strategy", `unknown strategy "fastest_ever"`}},
		{"missing provider", "[[routes]]\nmodel = \"x\"\ntargets = [{provider = \"nope\"}]\n",
			[]string{`routes[0] (model "x") targets[0]`, "provider", `no provider named "nope"`}},
		{"bad scheme", "[[providers]]\nname = \"p\"\napi_base = \"file:///etc/passwd\"\n",
			[]string{`providers[0] (name "p")`, "api_base", `scheme "file" not allowed`}},
		{"all-zero blend", "[adaptive_routing]\nlatency_weight = 0.0\ncost_weight = 0.0\nload_weight = 0.0\n",
			[]string{"adaptive_routing", "use enabled = false"}},
		{"exploration", "[adaptive_routing]\nexploration_ratio = 0.6\n", []string{"exploration_ratio must be in [0, 0.5]"}},
		{"bad duration", "[health]\ninterval = \"often\"\n", []string{"not a duration"}},
		{"negative weight", "[[providers]]\nname = \"p\"\napi_base = \"http://h\"\n[[routes]]\nmodel = \"m\"\ntargets = [{provider = \"p\", weight = -1}]\n",
			[]string{"weight", "≥ 1"}},
		{"zero weight", "[[providers]]\nname = \"p\"\napi_base = \"http://h\"\n[[routes]]\nmodel = \"m\"\ntargets = [{provider = \"p\"}, {provider = \"p\", weight = 0}]\n",
			[]string{`routes[0] (model "m") targets[1]`, "weight", "must be an integer ≥ 1, got 0"}},
		{"zero member weight", "[[providers]]\nname = \"p\"\napi_base = \"http://h\"\n[[provider_groups]]\nname = \"G\"\nslug = \"g\"\n[[provider_groups.members]]\nprovider = \"p\"\nweight = 0\n",
			[]string{`provider_groups[0] (name "G") members[0]`, "weight", "got 0"}},
		{"key provider unknown", "[[providers]]\nname = \"p\"\napi_base = \"http://h\"\n[[keys]]\nname = \"k\"\nsha256 = \"" + strings.Repeat("a", 64) + "\"\nproviders = [\"p\", \"nope\"]\n",
			[]string{`keys[0] (name "k")`, "providers[1]", `no provider named "nope"`}},
		{"catalog price", "[[models]]\nmodel = \"m\"\nprice_in_per_mtok = -1\n", []string{`models[0] (model "m")`, "price_in_per_mtok", "≥ 0"}},
		{"catalog duplicate", "[[models]]\nmodel = \"m\"\n[[models]]\nmodel = \"m\"\n", []string{`models[1] (model "m")`, "duplicate"}},
		{"unset key env", "[[keys]]\nname = \"k\"\nsecret_env = \"NOPE\"\n", []string{`keys[0] (name "k")`, "secret_env", "NOPE"}},
		{"negative generation", "generation = -1\n", []string{"rolter.toml", "generation"}},
		{"duplicate route", "[[providers]]\nname = \"p\"\napi_base = \"http://h\"\n[[routes]]\nmodel = \"m\"\ntargets = [{provider = \"p\"}]\n[[routes]]\nmodel = \"m\"\ntargets = [{provider = \"p\"}]\n",
			[]string{"duplicate route"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("rolter.toml", []byte(tc.toml), env(map[string]string{"TEAM_A_KEY": "x"}))
			if err == nil {
				t.Fatal("want an error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestGenerationIsTheFileRevision(t *testing.T) {
	c, err := Parse("rolter.toml", []byte("generation = 42\n"+good), env(map[string]string{"TEAM_A_KEY": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Generation != 42 {
		t.Fatalf("generation %d, want 42", c.Generation)
	}
	c, err = Parse("rolter.toml", []byte(good), env(map[string]string{"TEAM_A_KEY": "x"}))
	if err != nil || c.Generation != 0 {
		t.Fatalf("a file without generation: %d %v, want 0", c.Generation, err)
	}
}

func TestExampleFileParses(t *testing.T) {
	c, err := Load("../examples/rolter.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Generation == 0 || len(c.Providers) == 0 {
		t.Fatalf("examples/rolter.toml: generation %d, %d providers", c.Generation, len(c.Providers))
	}
}

func TestEnabledDefaultsToTrue(t *testing.T) {
	cfg, err := Parse("rolter.toml", []byte(`
[[providers]]
name = "p"
api_base = "http://h"
[[routes]]
model = "a"
targets = [{provider = "p"}]
[[routes]]
model = "b"
enabled = false
targets = [{provider = "p"}]
[[routes]]
model = "c"
enabled = true
targets = [{provider = "p"}]
[[provider_groups]]
name = "G"
slug = "g"
enabled = false
members = [{provider = "p"}]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false, true} {
		if got := cfg.Routes[i].IsEnabled(); got != want {
			t.Errorf("route %s enabled = %v, want %v", cfg.Routes[i].Model, got, want)
		}
	}
	if cfg.ProviderGroups[0].IsEnabled() {
		t.Error("group with enabled = false is enabled")
	}
}

func TestResumeStreamsIsOffByDefaultAndInheritsRetry(t *testing.T) {
	base := `
[[providers]]
name = "a"
api_base = "http://127.0.0.1:8000"

[[routes]]
model = "inherits"
targets = [{provider = "a"}]

[[routes]]
model = "off"
resume_streams = false
targets = [{provider = "a"}]

[[provider_groups]]
name = "g"
slug = "g"
resume_streams = true
members = [{provider = "a"}]
`
	for _, tc := range []struct {
		name, retry                string
		inherits, off, group, pins bool
		maxResumes                 int
	}{
		{"default", "", false, false, true, false, 1},
		{"retry on", "[retry]\nresume_streams = true\nmax_resumes = 3\n", true, false, true, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("rolter.toml", []byte(base+tc.retry), env(nil))
			if err != nil {
				t.Fatal(err)
			}
			got := []bool{c.Retry.Resumes(c.Routes[0].ResumeStreams), c.Retry.Resumes(c.Routes[1].ResumeStreams),
				c.Retry.Resumes(c.ProviderGroups[0].ResumeStreams), c.Retry.Resumes(nil)}
			want := []bool{tc.inherits, tc.off, tc.group, tc.pins}
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("resumes (inherits, off, group, pins) = %v, want %v", got, want)
					break
				}
			}
			if c.Retry.MaxResumes != tc.maxResumes {
				t.Errorf("max_resumes %d, want %d", c.Retry.MaxResumes, tc.maxResumes)
			}
		})
	}
	_, err := Parse("rolter.toml", []byte(base+"[retry]\nmax_resumes = 0\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), "retry: max_resumes") {
		t.Errorf("max_resumes = 0: %v", err)
	}
	_, err = Parse("rolter.toml", []byte(base+"[retry]\nresume_idle = \"-1s\"\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), "retry: resume_idle") {
		t.Errorf("resume_idle = -1s: %v", err)
	}
}
