package cluster

import (
	"encoding/json"
	"slices"
	"time"

	iradix "github.com/hashicorp/go-immutable-radix"
	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/cluster/raftstore"
	"github.com/rolter/rolter/config"
)

// This file converts between the Go state types and their protobuf wire
// form (raftstore). Each pair is a total, lossless mapping.

func targetsToPB(ts []config.Target) []*raftstore.Target {
	out := make([]*raftstore.Target, 0, len(ts))
	for _, t := range ts {
		out = append(out, &raftstore.Target{Provider: t.Provider, Model: t.Model, Weight: int64(t.Weight)})
	}
	return out
}

func targetsFromPB(ts []*raftstore.Target) []config.Target {
	out := make([]config.Target, 0, len(ts))
	for _, t := range ts {
		out = append(out, config.Target{Provider: t.GetProvider(), Model: t.GetModel(), Weight: int(t.GetWeight())})
	}
	return out
}

// entriesPB is a set of entries in their wire form, each kind sorted by
// name: what a seed, a snapshot and a file's revision encode alike.
type entriesPB struct {
	providers []*raftstore.Provider
	routes    []*raftstore.Route
	groups    []*raftstore.ProviderGroup
	keys      []*raftstore.Key
	models    []*raftstore.ModelPrice
}

func (e fileEntries) toPB() entriesPB {
	return entriesPB{providers: sortedPB(e.providers, providerToPB), routes: sortedPB(e.routes, routeToPB),
		groups: sortedPB(e.groups, groupToPB), keys: sortedPB(e.keys, keyToPB), models: sortedPB(e.models, modelPriceToPB)}
}

// sortedPB converts the values of m, in the order of their names.
func sortedPB[V, P any](m map[string]V, toPB func(V) P) []P {
	var out []P
	for _, v := range sortedValues(m) {
		out = append(out, toPB(v))
	}
	return out
}

// providerToPB converts a provider to its wire form.
func providerToPB(p config.Provider) *raftstore.Provider {
	return &raftstore.Provider{Name: p.Name, ApiBase: p.APIBase, ApiKeyEnv: p.APIKeyEnv,
		PriceInPerMtok: p.PriceInPerMtok, PriceOutPerMtok: p.PriceOutPerMtok, Readonly: p.ReadOnly}
}

func providerFromPB(p *raftstore.Provider) config.Provider {
	return config.Provider{Name: p.GetName(), APIBase: p.GetApiBase(), APIKeyEnv: p.GetApiKeyEnv(),
		PriceInPerMtok: p.GetPriceInPerMtok(), PriceOutPerMtok: p.GetPriceOutPerMtok(), ReadOnly: p.GetReadonly()}
}

// routeToPB converts a route to its wire form.
func routeToPB(r config.Route) *raftstore.Route {
	return &raftstore.Route{Model: r.Model, Strategy: r.Strategy, Targets: targetsToPB(r.Targets),
		Discover: r.Discover, Readonly: r.ReadOnly, MaxLoras: int32(r.MaxLoRAs), Disabled: !r.IsEnabled(),
		ResumeStreams: r.ResumeStreams}
}

func routeFromPB(r *raftstore.Route) config.Route {
	return config.Route{Model: r.GetModel(), Strategy: r.GetStrategy(), Targets: targetsFromPB(r.GetTargets()),
		Discover: r.GetDiscover(), ReadOnly: r.GetReadonly(), MaxLoRAs: int(r.GetMaxLoras()), Enabled: enabledFromPB(r.GetDisabled()),
		ResumeStreams: r.ResumeStreams}
}

// groupToPB converts a provider group to its wire form.
func groupToPB(g config.ProviderGroup) *raftstore.ProviderGroup {
	return &raftstore.ProviderGroup{Name: g.Name, Slug: g.Slug, Strategy: g.Strategy,
		Members: targetsToPB(g.Members), Readonly: g.ReadOnly, MaxLoras: int32(g.MaxLoRAs), Disabled: !g.IsEnabled(),
		ResumeStreams: g.ResumeStreams}
}

func groupFromPB(g *raftstore.ProviderGroup) config.ProviderGroup {
	return config.ProviderGroup{Name: g.GetName(), Slug: g.GetSlug(), Strategy: g.GetStrategy(),
		Members: targetsFromPB(g.GetMembers()), ReadOnly: g.GetReadonly(), MaxLoRAs: int(g.GetMaxLoras()),
		Enabled: enabledFromPB(g.GetDisabled()), ResumeStreams: g.ResumeStreams}
}

// enabledFromPB is the config form of a disabled flag: nil (the default,
// enabled) or false.
func enabledFromPB(disabled bool) *bool {
	if disabled {
		return config.Bool(false)
	}
	return nil
}

// modelPriceToPB converts a catalog entry to its wire form.
func modelPriceToPB(m config.ModelPrice) *raftstore.ModelPrice {
	return &raftstore.ModelPrice{Model: m.Model, PriceInPerMtok: m.PriceInPerMtok, PriceOutPerMtok: m.PriceOutPerMtok,
		Readonly: m.ReadOnly}
}

func modelPriceFromPB(m *raftstore.ModelPrice) config.ModelPrice {
	return config.ModelPrice{Model: m.GetModel(), PriceInPerMtok: m.GetPriceInPerMtok(),
		PriceOutPerMtok: m.GetPriceOutPerMtok(), ReadOnly: m.GetReadonly()}
}

// keyToPB converts an API key to its wire form.
func keyToPB(k APIKey) *raftstore.Key {
	var created int64
	if !k.Created.IsZero() {
		created = k.Created.UnixNano()
	}
	return &raftstore.Key{Name: k.Name, Sha256: k.SHA256, Models: slices.Clone(k.Models), Readonly: k.ReadOnly,
		Providers: slices.Clone(k.Providers), MaxPriority: k.MaxPriority, FairnessHeader: k.FairnessHeader,
		CreatedUnixNano: created}
}

func keyFromPB(k *raftstore.Key) APIKey {
	return APIKey{Name: k.GetName(), SHA256: k.GetSha256(), Models: slices.Clone(k.GetModels()), Providers: slices.Clone(k.GetProviders()),
		MaxPriority: k.GetMaxPriority(), FairnessHeader: k.GetFairnessHeader(),
		ReadOnly: k.GetReadonly(), Created: fromNanos(k.GetCreatedUnixNano())}
}

// tokenToPB converts an admin token to its wire form.
func tokenToPB(t AdminToken) *raftstore.AdminToken {
	return &raftstore.AdminToken{Name: t.Name, Sha256: t.SHA256, Role: raftstore.Role(t.Role), Readonly: t.ReadOnly}
}

func tokenFromPB(t *raftstore.AdminToken) AdminToken {
	return AdminToken{Name: t.GetName(), SHA256: t.GetSha256(), Role: Role(t.GetRole()), ReadOnly: t.GetReadonly()}
}

// policyToPB converts an adaptive policy to its wire form.
func policyToPB(p adaptive.Policy) *raftstore.Policy {
	return &raftstore.Policy{Enabled: p.Enabled, LatencyWeight: p.LatencyWeight, CostWeight: p.CostWeight,
		LoadWeight: p.LoadWeight, ExplorationRatio: p.ExplorationRatio, MinSamples: int64(p.MinSamples)}
}

func policyFromPB(p *raftstore.Policy) Policy {
	return Policy{Policy: adaptive.Policy{Enabled: p.GetEnabled(), LatencyWeight: p.GetLatencyWeight(),
		CostWeight: p.GetCostWeight(), LoadWeight: p.GetLoadWeight(), ExplorationRatio: p.GetExplorationRatio(),
		MinSamples: int(p.GetMinSamples())}, UpdatedAt: fromNanos(p.GetUpdatedUnixNano())}
}

func auditToPB(e AuditEntry) *raftstore.AuditEntry {
	return &raftstore.AuditEntry{Seq: e.Seq, TimeUnixNano: e.Time.UnixNano(), Actor: e.Actor, Action: e.Action,
		Resource: e.Resource, Outcome: e.Outcome, ConfigVersion: e.ConfigVersion, Diff: slices.Clone(e.Diff), Detail: string(e.Detail)}
}

func auditFromPB(e *raftstore.AuditEntry) AuditEntry {
	return AuditEntry{Seq: e.GetSeq(), Time: fromNanos(e.GetTimeUnixNano()), Actor: e.GetActor(), Action: e.GetAction(),
		Resource: e.GetResource(), Outcome: e.GetOutcome(), ConfigVersion: e.GetConfigVersion(), Diff: slices.Clone(e.GetDiff()),
		Detail: detailFromPB(e.GetDetail())}
}

func detailFromPB(d string) json.RawMessage {
	if d == "" {
		return nil
	}
	return json.RawMessage(d)
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// seedFromConfig builds the first-bootstrap seed from rolter.toml and the
// bootstrap superadmin token's SHA-256 (empty: none). Every entry the
// file declares is seeded file-owned (read-only), with the file's
// revision.
func seedFromConfig(c *config.Config, superadminSHA256 string) *raftstore.Seed {
	s := &raftstore.Seed{Revision: revisionToPB(FileRevisionOf(c))}
	if c != nil {
		e := declaredEntries(c).toPB()
		s.Providers, s.Routes, s.Groups, s.Keys, s.Models = e.providers, e.routes, e.groups, e.keys, e.models
		s.Policy = policyToPB(c.AdaptiveRouting.Policy())
		if a, ok := declaredAdmission(c); ok {
			s.Admission = admissionToPB(a)
		}
	}
	if superadminSHA256 != "" {
		s.Tokens = append(s.Tokens, tokenToPB(AdminToken{Name: "bootstrap", SHA256: superadminSHA256,
			Role: RoleSuperadmin, ReadOnly: true}))
	}
	return s
}

// toSnapshot encodes the whole state.
func (s *State) toSnapshot() *raftstore.Snapshot {
	out := &raftstore.Snapshot{ConfigVersion: s.ConfigVersion, Seeded: s.Seeded, AuditSeq: s.auditSeq,
		FileRevision: revisionToPB(s.File)}
	e := fileEntries{providers: s.Providers, routes: s.Routes, groups: s.Groups, keys: s.Keys, models: s.Models}.toPB()
	out.Providers, out.Routes, out.Groups, out.Keys, out.Models = e.providers, e.routes, e.groups, e.keys, e.models
	out.Tokens = sortedPB(s.Tokens, tokenToPB)
	pol := policyToPB(s.Policy.Policy)
	if !s.Policy.UpdatedAt.IsZero() {
		pol.UpdatedUnixNano = s.Policy.UpdatedAt.UnixNano()
	}
	out.Policy = pol
	out.Admission = admissionToPB(s.Admission)
	for _, e := range s.Audit {
		out.Audit = append(out.Audit, auditToPB(e))
	}
	for _, k := range s.idem.order {
		if r, ok := s.idem.get(k); ok {
			out.Idempotency = append(out.Idempotency, &raftstore.IdempotencyRecord{Key: k, Result: r})
		}
	}
	return out
}

// stateFromSnapshot decodes a snapshot into a fresh State.
func stateFromSnapshot(sn *raftstore.Snapshot) *State {
	s := emptyState()
	s.ConfigVersion, s.Seeded, s.auditSeq = sn.GetConfigVersion(), sn.GetSeeded(), sn.GetAuditSeq()
	s.File = revisionFromPB(sn.GetFileRevision())
	for _, p := range sn.GetProviders() {
		s.Providers[p.GetName()] = providerFromPB(p)
	}
	for _, r := range sn.GetRoutes() {
		s.Routes[r.GetModel()] = routeFromPB(r)
	}
	for _, g := range sn.GetGroups() {
		s.Groups[g.GetName()] = groupFromPB(g)
	}
	for _, k := range sn.GetKeys() {
		s.Keys[k.GetName()] = keyFromPB(k)
	}
	for _, t := range sn.GetTokens() {
		s.Tokens[t.GetSha256()] = tokenFromPB(t)
	}
	for _, m := range sn.GetModels() {
		s.Models[m.GetModel()] = modelPriceFromPB(m)
	}
	if sn.GetPolicy() != nil {
		s.Policy = policyFromPB(sn.GetPolicy())
	}
	if sn.GetAdmission() != nil {
		s.Admission = admissionFromPB(sn.GetAdmission())
	}
	for _, e := range sn.GetAudit() {
		s.Audit = append(s.Audit, auditFromPB(e))
	}
	for _, r := range sn.GetIdempotency() {
		s.idem = s.idem.put(r.GetKey(), r.GetResult())
	}
	return s
}

// IdempotencyCapacity bounds how many recent idempotency keys the FSM
// remembers; a retry older than that applies again.
const IdempotencyCapacity = 10_000

// idemTable is an immutable map of recent idempotency keys to results,
// with insertion order for eviction. Every put returns a new table; old
// versions stay valid for snapshots being persisted.
type idemTable struct {
	tree  *iradix.Tree
	order []string
}

func (t idemTable) get(key string) (*raftstore.Result, bool) {
	if t.tree == nil {
		return nil, false
	}
	v, ok := t.tree.Get([]byte(key))
	if !ok {
		return nil, false
	}
	return v.(*raftstore.Result), true
}

func (t idemTable) put(key string, r *raftstore.Result) idemTable {
	tree := t.tree
	if tree == nil {
		tree = iradix.New()
	}
	tree, _, _ = tree.Insert([]byte(key), r)
	// Appending never overwrites an element an older table can see: the
	// FSM derives exactly one successor from each state.
	order := append(t.order, key)
	for len(order) > IdempotencyCapacity {
		tree, _, _ = tree.Delete([]byte(order[0]))
		order = order[1:]
	}
	return idemTable{tree: tree, order: order}
}
