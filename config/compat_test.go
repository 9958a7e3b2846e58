package config

import (
	"strings"
	"testing"
	"time"
)

// Keys users of the original gateway have in their rolter.toml: accepted
// where they map onto rolter, else an error that names the replacement;
// never "unknown key".
func TestOriginalGatewayKeys(t *testing.T) {
	env := map[string]string{"VLLM_KEY": "secret"}
	getenv := func(k string) string { return env[k] }
	route := "\n[[routes]]\nmodel = \"m\"\ntargets = [{ provider = \"a\" }]\n"
	for _, tc := range []struct {
		name  string
		toml  string
		want  []string // error fragments; nil: accepted
		check func(t *testing.T, c *Config)
	}{
		{name: "kind of an OpenAI-compatible engine", toml: `
[[providers]]
name = "a"
kind = "vllm"
api_base = "http://127.0.0.1:8000"`},
		{name: "kind rolter cannot speak", toml: `
[[providers]]
name = "a"
kind = "anthropic"
api_base = "https://api.anthropic.com"`, want: []string{`providers[0] (name "a"): kind: "anthropic" is not supported`, "OpenAI-compatible"}},
		{name: "slug alone becomes the name", toml: `
[[providers]]
slug = "a"
api_base = "http://127.0.0.1:8000"`, check: func(t *testing.T, c *Config) {
			if c.Providers[0].Name != "a" {
				t.Fatalf("name %q", c.Providers[0].Name)
			}
		}},
		{name: "slug that contradicts the name", toml: `
[[providers]]
name = "a"
slug = "engine-a"
api_base = "http://127.0.0.1:8000"`, want: []string{"slug:", `set name = "engine-a" and remove slug`}},
		{name: "api_key naming an environment variable", toml: `
[[providers]]
name = "a"
api_key = "${VLLM_KEY}"
api_base = "http://127.0.0.1:8000"`, check: func(t *testing.T, c *Config) {
			if c.Providers[0].APIKeyEnv != "VLLM_KEY" {
				t.Fatalf("api_key_env %q", c.Providers[0].APIKeyEnv)
			}
		}},
		{name: "api_keys with one env reference", toml: `
[[providers]]
name = "a"
api_keys = ["os.environ/VLLM_KEY"]
api_base = "http://127.0.0.1:8000"`, check: func(t *testing.T, c *Config) {
			if c.Providers[0].APIKeyEnv != "VLLM_KEY" {
				t.Fatalf("api_key_env %q", c.Providers[0].APIKeyEnv)
			}
		}},
		{name: "literal api_key", toml: `
[[providers]]
name = "a"
api_key = "sk-live-123"
api_base = "http://127.0.0.1:8000"`, want: []string{"api_key:", "api_key_env"}},
		{name: "several api_keys", toml: `
[[providers]]
name = "a"
api_keys = ["$K1", "$K2"]
api_base = "http://127.0.0.1:8000"`, want: []string{"api_keys:", "one provider per key"}},
		{name: "kv_events names the sidecar flags", toml: `
[[providers]]
name = "a"
api_base = "http://10.0.0.7:8000/v1"
[providers.kv_events]
endpoint = "tcp://10.0.0.7:5557"
replay_endpoint = "tcp://10.0.0.7:5558"
topic = "kv@10.0.0.7"`, want: []string{"kv_events:", "rolter sidecar --engine http://10.0.0.7:8000 --kv-events tcp://10.0.0.7:5557 " +
			"--kv-events-replay tcp://10.0.0.7:5558 --topic kv@10.0.0.7", "--join", "--gossip"}},
		{name: "lmcache table", toml: `
[[providers]]
name = "a"
api_base = "http://127.0.0.1:8000"
[providers.lmcache]
url = "http://127.0.0.1:9000/occupancy"`, check: func(t *testing.T, c *Config) {
			l := c.Providers[0].LMCache
			if l == nil || l.URL != "http://127.0.0.1:9000/occupancy" || l.Interval.Duration != time.Second || l.CapacityBytes != 5<<30 {
				t.Fatalf("lmcache %+v", l)
			}
		}},
		{name: "lmcache without a URL", toml: `
[[providers]]
name = "a"
api_base = "http://127.0.0.1:8000"
[providers.lmcache]
interval = "2s"`, want: []string{"lmcache.url: required"}},
		{name: "metrics_scrape section enables it", toml: `
[[providers]]
name = "a"
api_base = "http://127.0.0.1:8000"
[metrics_scrape]
interval = "250ms"`, check: func(t *testing.T, c *Config) {
			m := c.MetricsScrape
			if !m.Enabled || m.Interval.Duration != 250*time.Millisecond || m.Path != "/metrics" {
				t.Fatalf("metrics_scrape %+v", m)
			}
		}},
		{name: "metrics_scrape explicitly off", toml: `
[[providers]]
name = "a"
api_base = "http://127.0.0.1:8000"
[metrics_scrape]
enabled = false`, check: func(t *testing.T, c *Config) {
			if c.MetricsScrape.Enabled {
				t.Fatal("enabled = false ignored")
			}
		}},
		{name: "no section: off", toml: `
[[providers]]
name = "a"
api_base = "http://127.0.0.1:8000"`, check: func(t *testing.T, c *Config) {
			if c.MetricsScrape.Enabled {
				t.Fatal("scraping on without [metrics_scrape]")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("rolter.toml", []byte(tc.toml+route), getenv)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if tc.check != nil {
					tc.check(t, cfg)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), "unknown key") {
				t.Errorf("answered \"unknown key\": %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
