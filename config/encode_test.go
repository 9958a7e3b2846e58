package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// every sets something in every section and every kind of entry, with
// values that differ from the defaults.
const every = `
generation = 7

[[providers]]
name = "vllm-a"
api_base = "http://127.0.0.1:8000"
price_in_per_mtok = 0.30000000000000004
price_out_per_mtok = 1.5
[providers.lmcache]
url = "http://127.0.0.1:8000/lmcache"

[[providers]]
name = "vllm-b"
api_base = "http://127.0.0.1:8001"
api_key_env = "VLLM_B_KEY"

[[routes]]
model = "llama"
strategy = "cache_aware"
max_loras = 2
resume_streams = false
targets = [{provider = "vllm-a", model = "meta-llama/Llama-3.1-8B"}, {provider = "vllm-b", weight = 3}]

[[routes]]
model = "off"
enabled = false
targets = [{provider = "vllm-a"}]

[[routes]]
model = "found"
strategy = "power_of_two"
discover = true

[[provider_groups]]
name = "LoRA fleet"
slug = "lora"
strategy = "lora_aware"
max_loras = 2
members = [{provider = "vllm-a"}, {provider = "vllm-b"}]

[[models]]
model = "meta-llama/Llama-3.1-8B"
price_in_per_mtok = 0.1
price_out_per_mtok = 0.2

[[keys]]
name = "team-a"
secret_env = "TEAM_A_KEY"
models = ["llama"]
providers = ["vllm-a"]

[adaptive_routing]
enabled = true
cost_weight = 0.5

[retry]
attempts = 1
resume_streams = true

[breaker]
open = "10s"

[health]
interval = "2s"

[timeouts]
drain = "1s"

[limits]
allowed_hosts = ["127.0.0.1"]

[metrics_scrape]
interval = "250ms"

[tracing]
endpoint = "http://127.0.0.1:4318"
sample_ratio = 0.5

[observability]
request_log = true
`

var testEnv = env(map[string]string{"TEAM_A_KEY": "sk-a", "VLLM_B_KEY": "sk-b"})

// reload encodes c into a file and loads it back.
func reload(t *testing.T, c *Config) (*Config, string) {
	t.Helper()
	var b strings.Builder
	if err := Encode(&b, c, "written by a test\nsecond line"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rolter.toml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"TEAM_A_KEY": "sk-a", "VLLM_B_KEY": "sk-b"} {
		t.Setenv(k, v)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatalf("loading what Encode wrote: %v\n%s", err, b.String())
	}
	return got, b.String()
}

func TestEncodeRoundTrips(t *testing.T) {
	want, err := Parse("rolter.toml", []byte(every), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	got, text := reload(t, want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("encode → load differs:\n got %+v\nwant %+v\nfile:\n%s", got, want, text)
	}
	if !strings.HasPrefix(text, "# written by a test\n# second line\n") {
		t.Errorf("header not written as comments:\n%s", text)
	}
	if strings.Contains(text, "sk-a") {
		t.Errorf("the file holds a key's secret:\n%s", text)
	}
	// The metrics section was written without enabled in the source (so
	// on); it must stay on, and a disabled one with a changed interval
	// must stay off.
	if !got.MetricsScrape.Enabled {
		t.Error("[metrics_scrape] lost enabled")
	}
	want.MetricsScrape.Enabled = false
	if got, text := reload(t, want); got.MetricsScrape.Enabled {
		t.Errorf("a disabled [metrics_scrape] came back enabled:\n%s", text)
	}
}

func TestEncodeLeavesDefaultsOut(t *testing.T) {
	def := Default()
	var b strings.Builder
	if err := Encode(&b, &def, ""); err != nil {
		t.Fatal(err)
	}
	if s := strings.TrimSpace(b.String()); s != "" {
		t.Fatalf("the default config encodes to %q, want nothing", s)
	}
	c := Default()
	c.Health.Interval = Duration{2 * time.Second}
	c.Providers = []Provider{{Name: "e1", APIBase: "http://127.0.0.1:9000"}}
	c.Routes = []Route{{Model: "chat", Targets: []Target{{Provider: "e1"}}}}
	got, text := reload(t, &c)
	if strings.Contains(text, "[timeouts]") || strings.Contains(text, "down_after") {
		t.Errorf("default sections or keys written:\n%s", text)
	}
	if got.Health.Interval.Duration != 2*time.Second || got.Health.DownAfter != def.Health.DownAfter {
		t.Errorf("[health] came back as %+v", got.Health)
	}
	// A zero weight and an empty strategy are left out, so they load as
	// their defaults instead of failing.
	if r := got.Routes[0]; r.Strategy != "round_robin" || r.Targets[0].Weight != 1 || r.Targets[0].Model != "chat" {
		t.Errorf("route came back as %+v", r)
	}
}

// TestEncodeKnowsEveryKey fails when a key is added to the schema but not
// to what Encode writes, which would drop it from every written file.
func TestEncodeKnowsEveryKey(t *testing.T) {
	keys := func(typ reflect.Type) map[string]bool {
		out := map[string]bool{}
		for i := range typ.NumField() {
			if name, _, _ := strings.Cut(typ.Field(i).Tag.Get("toml"), ","); name != "" {
				out[name] = true
			}
		}
		return out
	}
	for _, pair := range []struct{ schema, written any }{
		{Config{}, file{}}, {Provider{}, encProvider{}}, {LMCache{}, encLMCache{}}, {Target{}, encTarget{}},
		{Route{}, encRoute{}}, {ProviderGroup{}, encGroup{}}, {ModelPrice{}, encModelPrice{}}, {Key{}, encKey{}},
	} {
		s, w := reflect.TypeOf(pair.schema), reflect.TypeOf(pair.written)
		have := keys(w)
		for k := range keys(s) {
			if !have[k] {
				t.Errorf("%s key %q is not written by Encode (%s)", s.Name(), k, w.Name())
			}
		}
	}
}
