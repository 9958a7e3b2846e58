package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// Keys of the original gateway's rolter.toml that rolter reads only to map
// them or to say what replaces them. They never reach Config: what maps is
// moved onto rolter's own fields, the rest is an error naming the
// replacement, so a migrated file never silently changes meaning.
type compatProvider struct {
	Kind     string         `toml:"kind"`
	Slug     string         `toml:"slug"`
	APIKey   string         `toml:"api_key"`
	APIKeys  []string       `toml:"api_keys"`
	KVEvents map[string]any `toml:"kv_events"`
}

// compatKeys are the provider keys compatProvider reads.
var compatKeys = []string{"kind", "slug", "api_key", "api_keys", "kv_events"}

// openAIKinds are provider kinds that speak the OpenAI-compatible API,
// which is what rolter sends to every provider: kind is then redundant.
var openAIKinds = []string{"openai", "openai_compatible", "openai-compatible", "vllm", "sglang", "tgi", "lmdeploy",
	"llamacpp", "llama.cpp", "ollama", "custom"}

// isCompatKey reports whether an undecoded key is one applyCompat handles.
func isCompatKey(k toml.Key) bool {
	return len(k) >= 2 && k[0] == "providers" && slices.Contains(compatKeys, k[1])
}

// applyCompat maps the original gateway's provider keys in data onto cfg
// (decoded from the same data) and returns an error per key it refuses.
func applyCompat(file string, data []byte, cfg *Config) []error {
	var raw struct {
		Providers []compatProvider `toml:"providers"`
	}
	if _, err := toml.Decode(string(data), &raw); err != nil {
		return []error{&FieldError{File: file, Msg: err.Error()}}
	}
	v := &validator{file: file}
	for i, c := range raw.Providers {
		if i >= len(cfg.Providers) {
			break
		}
		p := &cfg.Providers[i]
		entry := fmt.Sprintf("providers[%d] (name %q)", i, p.Name)
		if c.Kind != "" && !slices.Contains(openAIKinds, strings.ToLower(c.Kind)) {
			v.add(entry, "kind", fmt.Sprintf("%q is not supported: rolter sends the OpenAI-compatible API to every provider "+
				"(kind is not needed for openai, vllm, sglang or tgi); point api_base at an OpenAI-compatible endpoint "+
				"for this provider and remove kind", c.Kind))
		}
		switch {
		case c.Slug == "" || c.Slug == p.Name:
		case p.Name == "":
			p.Name = c.Slug
		default:
			v.add(entry, "slug", fmt.Sprintf("%q differs from name %q: rolter addresses a provider by its name "+
				"(\"%s/<model>\" pins it); set name = %q and remove slug", c.Slug, p.Name, p.Name, c.Slug))
		}
		keys := c.APIKeys
		if c.APIKey != "" {
			keys = append([]string{c.APIKey}, keys...)
		}
		switch {
		case len(keys) == 0:
		case len(keys) > 1:
			v.add(entry, "api_keys", "rolter sends one key per provider: declare one provider per key (the same api_base, "+
				"each with its own api_key_env) and list them all as targets of the route")
		case p.APIKeyEnv != "":
			v.add(entry, "api_key", "set either api_key or api_key_env, not both")
		default:
			if name, ok := envReference(keys[0]); ok {
				p.APIKeyEnv = name
			} else {
				field := "api_key"
				if c.APIKey == "" {
					field = "api_keys"
				}
				v.add(entry, field, "rolter does not keep secrets in rolter.toml: put the key in an environment variable "+
					"and name it with api_key_env = \"VAR\" (or write api_key = \"${VAR}\")")
			}
		}
		if c.KVEvents != nil {
			v.add(entry, "kv_events", kvEventsReplacement(p.APIBase, c.KVEvents))
		}
	}
	return v.errs
}

// envReference recognises an environment variable written as a key:
// ${VAR}, $VAR, env:VAR or os.environ/VAR.
func envReference(s string) (string, bool) {
	s = strings.TrimSpace(s)
	var name string
	switch {
	case strings.HasPrefix(s, "${") && strings.HasSuffix(s, "}"):
		name = s[2 : len(s)-1]
	case strings.HasPrefix(s, "$"):
		name = s[1:]
	case strings.HasPrefix(s, "env:"):
		name = s[4:]
	case strings.HasPrefix(s, "os.environ/"):
		name = s[len("os.environ/"):]
	default:
		return "", false
	}
	if name == "" || strings.IndexFunc(name, func(r rune) bool {
		return !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}) >= 0 {
		return "", false
	}
	return name, true
}

// kvEventsReplacement is the error for [providers.kv_events]: the command
// line of the sidecar that does the same job, filled from the table.
func kvEventsReplacement(apiBase string, t map[string]any) string {
	str := func(keys ...string) string {
		for _, k := range keys {
			if s, ok := t[k].(string); ok && s != "" {
				return s
			}
		}
		return ""
	}
	engine := strings.TrimSuffix(strings.TrimSuffix(apiBase, "/"), "/v1")
	if engine == "" {
		engine = "<engine URL>"
	}
	cmd := []string{"rolter sidecar", "--engine " + engine}
	endpoint := str("endpoint", "zmq_endpoint", "url", "address")
	if endpoint == "" {
		endpoint = "tcp://<engine host>:5557"
	}
	cmd = append(cmd, "--kv-events "+endpoint)
	if r := str("replay_endpoint", "replay"); r != "" {
		cmd = append(cmd, "--kv-events-replay "+r)
	}
	if tp := str("topic"); tp != "" {
		cmd = append(cmd, "--topic "+tp)
	}
	if b, ok := t["bind"].(bool); ok && b {
		cmd = append(cmd, "--kv-events-bind")
	}
	cmd = append(cmd, "--gossip <its HOST:PORT>", "--join <this router's --gossip HOST:PORT>")
	var known []string
	for k := range t {
		known = append(known, k)
	}
	sort.Strings(known)
	return fmt.Sprintf("[providers.kv_events] is not read by the router (it never links ZMQ; following KV events is "+
		"the sidecar's job): remove it and run `%s` beside the engine, and start the router with --gossip "+
		"(keys found: %s)", strings.Join(cmd, " "), strings.Join(known, ", "))
}
