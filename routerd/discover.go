package routerd

import (
	"slices"
	"strings"

	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/config"
)

// Discovery: a route with `discover = true` lists no targets of its own;
// its targets are the live engines the sidecars announce for its model.

// engineKey maps a provider's api_base to the engine URL sidecars announce:
// the /v1 suffix routes may carry is dropped, then mesh.NormalizeURL.
func engineKey(apiBase string) string {
	u := mesh.NormalizeURL(apiBase)
	return strings.TrimSuffix(u, "/v1")
}

// discover returns cfg with every `discover = true` route's targets filled
// from the engines gossip announces for the route's model: one target per
// live engine, through the provider whose api_base is that engine when one
// exists, else through a provider synthesized for it (named after the
// sidecar's node id, or the engine URL when that name is taken). cfg itself
// is not modified.
func discover(cfg *config.Config, engines func(model string) []mesh.EngineInfo) *config.Config {
	any := false
	for _, r := range cfg.Routes {
		any = any || r.Discover
	}
	if !any {
		return cfg
	}
	out := *cfg
	out.Providers = slices.Clone(cfg.Providers)
	out.Routes = slices.Clone(cfg.Routes)
	byKey := map[string]string{} // engine key → provider name
	names := map[string]bool{}
	for _, p := range out.Providers {
		names[p.Name] = true
		if _, ok := byKey[engineKey(p.APIBase)]; !ok {
			byKey[engineKey(p.APIBase)] = p.Name
		}
	}
	for i, r := range out.Routes {
		if !r.Discover {
			continue
		}
		targets := slices.Clone(r.Targets)
		for _, e := range engines(r.Model) {
			key := engineKey(e.EngineURL)
			name, ok := byKey[key]
			if !ok {
				name = e.NodeID
				if name == "" || names[name] {
					name = key
				}
				out.Providers = append(out.Providers, config.Provider{Name: name, APIBase: e.EngineURL})
				names[name], byKey[key] = true, name
			}
			if !slices.ContainsFunc(targets, func(t config.Target) bool { return t.Provider == name && t.Model == r.Model }) {
				targets = append(targets, config.Target{Provider: name, Model: r.Model, Weight: 1})
			}
		}
		out.Routes[i].Targets = targets
	}
	return &out
}

// discoveredKey fingerprints the targets of cfg's discover routes.
func discoveredKey(cfg *config.Config) string {
	var b strings.Builder
	for _, r := range cfg.Routes {
		if !r.Discover {
			continue
		}
		b.WriteString(r.Model)
		for _, t := range r.Targets {
			b.WriteString("\x00")
			b.WriteString(t.Provider)
			for _, p := range cfg.Providers {
				if p.Name == t.Provider {
					b.WriteString("=" + p.APIBase)
				}
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
