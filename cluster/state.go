package cluster

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/config"
)

// Role is an admin token's authority. Roles are ordered: a superadmin may
// do everything an admin may, an admin everything a viewer may.
type Role int

// The admin roles.
const (
	RoleNone Role = iota
	RoleViewer
	RoleAdmin
	RoleSuperadmin
)

// String returns the role's API name.
func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleAdmin:
		return "admin"
	case RoleSuperadmin:
		return "superadmin"
	}
	return "none"
}

// ParseRole maps an API role name to a Role (RoleNone when unknown).
func ParseRole(s string) Role {
	switch strings.ToLower(s) {
	case "viewer":
		return RoleViewer
	case "admin":
		return RoleAdmin
	case "superadmin":
		return RoleSuperadmin
	}
	return RoleNone
}

// APIKey is a client API key as replicated: its secret is never stored,
// only the hex SHA-256.
type APIKey struct {
	Name   string   `json:"name"`
	SHA256 string   `json:"-"`
	Models []string `json:"models"`
	// Providers is the key's provider allowlist (empty: every provider).
	Providers []string `json:"providers"`
	// MaxPriority caps the admission band the key may ask for ("":
	// standard); FairnessHeader lets it name its fairness flow.
	MaxPriority    string    `json:"max_priority"`
	FairnessHeader bool      `json:"fairness_header"`
	ReadOnly       bool      `json:"readonly"`
	Created        time.Time `json:"created_at"`
}

// AdminToken is an admin API bearer token, stored as the hex SHA-256 of
// its secret.
type AdminToken struct {
	Name     string
	SHA256   string
	Role     Role
	ReadOnly bool
}

// Policy is the stored adaptive routing policy and when it last changed.
type Policy struct {
	adaptive.Policy
	UpdatedAt time.Time
}

// AuditEntry records one write: who, what, on which resource, when, and
// how it ended. It never holds a secret.
type AuditEntry struct {
	Seq           uint64    `json:"seq"`
	Time          time.Time `json:"time"`
	Actor         string    `json:"actor"`
	Action        string    `json:"action"`
	Resource      string    `json:"resource"`
	Outcome       string    `json:"outcome"`
	ConfigVersion uint64    `json:"config_version"`
	// Diff is what a config.file_sync changed, one line per field.
	Diff []string `json:"diff,omitempty"`
	// Detail says what the change was, as JSON; for
	// adaptive_routing_policy.update a PolicyChange. Empty for other
	// actions.
	Detail json.RawMessage `json:"detail,omitempty"`
}

// PolicyChange is the audit detail of an adaptive routing policy update:
// the six policy fields before and after (After is what was asked for
// when the update was refused), and the routes the policy governs.
type PolicyChange struct {
	Before         adaptive.Policy `json:"before"`
	After          adaptive.Policy `json:"after"`
	AffectedRoutes []string        `json:"affected_routes"`
}

// State is one immutable version of the replicated control-plane state.
// A *State handed out by the Store is never modified afterwards: readers
// may keep it as long as they like without locking, and must not modify
// it (maps and slices included).
type State struct {
	// ConfigVersion counts applied changes to the data-plane config
	// (providers, routes, groups, keys, policy). It starts at 0 before the
	// seed from rolter.toml is applied.
	ConfigVersion uint64
	// AppliedIndex is the Raft index this state reflects.
	AppliedIndex uint64
	Seeded       bool
	// File is the revision of rolter.toml the file-owned (read-only)
	// entries come from.
	File      FileRevision
	Providers map[string]config.Provider
	Routes    map[string]config.Route
	Groups    map[string]config.ProviderGroup
	// Keys is keyed by key name.
	Keys map[string]APIKey
	// Tokens is keyed by the token's hex SHA-256.
	Tokens map[string]AdminToken
	// Models is the model price catalog, keyed by upstream model.
	Models map[string]config.ModelPrice
	Policy Policy
	// Admission is the [admission] section (ReadOnly: rolter.toml owns it).
	Admission config.Admission
	// Audit holds the most recent entries, oldest first, at most
	// AuditCapacity of them.
	Audit    []AuditEntry
	auditSeq uint64
	idem     idemTable
}

// AuditCapacity bounds the replicated audit log.
const AuditCapacity = 10_000

func emptyState() *State {
	return &State{
		Providers: map[string]config.Provider{},
		Routes:    map[string]config.Route{},
		Groups:    map[string]config.ProviderGroup{},
		Keys:      map[string]APIKey{},
		Tokens:    map[string]AdminToken{},
		Models:    map[string]config.ModelPrice{},
		Policy:    Policy{Policy: adaptive.DefaultPolicy()},
		Admission: config.DefaultAdmission(),
	}
}

// ProviderList returns the providers sorted by name.
func (s *State) ProviderList() []config.Provider { return sortedValues(s.Providers) }

// RouteList returns the routes sorted by public model name.
func (s *State) RouteList() []config.Route { return sortedValues(s.Routes) }

// GroupList returns the provider groups sorted by name.
func (s *State) GroupList() []config.ProviderGroup { return sortedValues(s.Groups) }

// ModelList returns the price catalog sorted by model.
func (s *State) ModelList() []config.ModelPrice { return sortedValues(s.Models) }

// KeyList returns the API keys sorted by name.
func (s *State) KeyList() []APIKey { return sortedValues(s.Keys) }

// TokenRole returns the role of the admin token whose SHA-256 is sum and
// the token's name; RoleNone when no such token exists.
func (s *State) TokenRole(sum string) (Role, string) {
	t, ok := s.Tokens[sum]
	if !ok {
		return RoleNone, ""
	}
	return t.Role, t.Name
}

// AffectedRoutes returns the sorted public model names of the enabled
// routes on the adaptive strategy.
func (s *State) AffectedRoutes() []string {
	out := []string{}
	for _, r := range s.Routes {
		if r.Strategy == "adaptive" && r.IsEnabled() {
			out = append(out, r.Model)
		}
	}
	sort.Strings(out)
	return out
}

// Config turns the state into the data plane's *config.Config: base
// carries the process-local sections (retry, breaker, health, timeouts,
// limits) that are not replicated; the providers, routes, groups, keys
// and adaptive policy come from the state. base may be nil (defaults).
func (s *State) Config(base *config.Config) *config.Config {
	var c config.Config
	if base != nil {
		c = *base
	} else {
		c = config.Default()
	}
	c.Providers = s.ProviderList()
	c.Routes = make([]config.Route, 0, len(s.Routes))
	for _, r := range s.RouteList() {
		r.Targets = slices.Clone(r.Targets)
		c.Routes = append(c.Routes, r)
	}
	c.ProviderGroups = make([]config.ProviderGroup, 0, len(s.Groups))
	for _, g := range s.GroupList() {
		g.Members = slices.Clone(g.Members)
		c.ProviderGroups = append(c.ProviderGroups, g)
	}
	c.Keys = make([]config.Key, 0, len(s.Keys))
	for _, k := range s.KeyList() {
		c.Keys = append(c.Keys, config.Key{Name: k.Name, SHA256: k.SHA256, Models: slices.Clone(k.Models),
			Providers: slices.Clone(k.Providers), MaxPriority: k.MaxPriority, FairnessHeader: k.FairnessHeader, ReadOnly: k.ReadOnly})
	}
	c.Models = s.ModelList()
	c.Admission = s.Admission
	p := s.Policy.Policy
	c.AdaptiveRouting = config.AdaptiveRouting{Enabled: p.Enabled, LatencyWeight: p.LatencyWeight, CostWeight: p.CostWeight,
		LoadWeight: p.LoadWeight, ExplorationRatio: p.ExplorationRatio, MinSamples: p.MinSamples}
	return &c
}

func sortedValues[V any](m map[string]V) []V {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]V, 0, len(keys))
	for _, k := range keys {
		out = append(out, m[k])
	}
	return out
}

// clone returns a shallow copy of s for the FSM to derive the next
// version from; maps are copied only when the command touches them.
func (s *State) clone() *State {
	n := *s
	return &n
}

func cloneMap[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}
