package cluster

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rolter/rolter/cluster/raftstore"
	"github.com/rolter/rolter/config"
	"google.golang.org/protobuf/proto"
)

// This file is rolter.toml as code. The entries the file declares
// (providers, routes, provider groups, keys, the [[models]] price
// catalog) are owned by the file: they
// are stored read-only, the admin API refuses to change them, and every
// router, on start and on SIGHUP, sends the difference between its file
// and the stored file-owned entries to the leader as one FileSync
// command. Entries created through the admin API are never touched.
//
// The file's revision is its `generation` key plus the SHA-256 of the
// declared entries. The rule (CheckRevision), applied by the sender and
// again by the FSM:
//
//   - a higher generation than the stored one applies;
//   - the same generation with the same hash is already applied: nothing
//     happens (several routers sending the same file make one change);
//   - the same generation with a different hash is refused: two files
//     claim one generation, and the operator must raise it;
//   - a lower generation is refused: that router's file is older than
//     the one the cluster runs, and cannot roll it back.
//
// A FileSync also names the stored revision it was computed against
// (base); when the state moved since, the FSM refuses it and the sender
// computes the difference again.

// FileRevision identifies one content of the file-owned entries.
type FileRevision struct {
	Generation uint64 `json:"generation"`
	SHA256     string `json:"sha256"`
}

func (r FileRevision) String() string {
	if r.SHA256 == "" {
		return fmt.Sprintf("generation %d (no file synced yet)", r.Generation)
	}
	return fmt.Sprintf("generation %d (sha256 %.12s)", r.Generation, r.SHA256)
}

// Sentinel errors of the generation rule; both wrap ErrFileRefused.
var (
	ErrFileRefused      = errors.New("rolter.toml not applied")
	ErrOlderGeneration  = fmt.Errorf("%w: its generation is older than the cluster's", ErrFileRefused)
	ErrGenerationReused = fmt.Errorf("%w: the cluster applied this generation with different content", ErrFileRefused)
)

// CheckRevision applies the generation rule to a file at want against the
// stored revision have: changed reports whether syncing it changes the
// state; err (wrapping ErrFileRefused) says why it must not be synced.
func CheckRevision(have, want FileRevision) (changed bool, err error) {
	switch {
	case have.SHA256 == "":
		return true, nil // nothing synced yet (a cluster seeded before file ownership)
	case want.SHA256 == have.SHA256 && want.Generation <= have.Generation:
		return false, nil
	case want.Generation > have.Generation:
		return true, nil
	case want.Generation == have.Generation:
		return false, fmt.Errorf("%w: generation %d is stored with sha256 %.12s, this file has sha256 %.12s; "+
			"raise generation in rolter.toml to %d to apply it", ErrGenerationReused, have.Generation, have.SHA256,
			want.SHA256, have.Generation+1)
	default:
		return false, fmt.Errorf("%w: this file has generation %d, the cluster runs generation %d (sha256 %.12s); "+
			"update this router's rolter.toml", ErrOlderGeneration, want.Generation, have.Generation, have.SHA256)
	}
}

// fileEntries is a set of file-owned entries by name.
type fileEntries struct {
	providers map[string]config.Provider
	routes    map[string]config.Route
	groups    map[string]config.ProviderGroup
	keys      map[string]APIKey
	models    map[string]config.ModelPrice
}

func newFileEntries() fileEntries {
	return fileEntries{providers: map[string]config.Provider{}, routes: map[string]config.Route{},
		groups: map[string]config.ProviderGroup{}, keys: map[string]APIKey{}, models: map[string]config.ModelPrice{}}
}

// declaredEntries is what c declares, as it is stored: read-only.
func declaredEntries(c *config.Config) fileEntries {
	e := newFileEntries()
	if c == nil {
		return e
	}
	for _, p := range c.Providers {
		p.ReadOnly = true
		e.providers[p.Name] = p
	}
	for _, r := range c.Routes {
		r.ReadOnly, r.Targets = true, slices.Clone(r.Targets)
		e.routes[r.Model] = r
	}
	for _, g := range c.ProviderGroups {
		g.ReadOnly, g.Members = true, slices.Clone(g.Members)
		e.groups[g.Name] = g
	}
	for _, k := range c.Keys {
		// Every field of config.Key the state keeps must be copied here:
		// this is the seed's and every file sync's only source of keys.
		e.keys[k.Name] = APIKey{Name: k.Name, SHA256: k.SHA256, Models: slices.Clone(k.Models), Providers: slices.Clone(k.Providers),
			MaxPriority: k.MaxPriority, FairnessHeader: k.FairnessHeader, ReadOnly: true}
	}
	for _, m := range c.Models {
		m.ReadOnly = true
		e.models[m.Model] = m
	}
	return e
}

// ownedEntries is the file-owned part of s: its read-only entries.
func ownedEntries(s *State) fileEntries {
	e := newFileEntries()
	for n, p := range s.Providers {
		if p.ReadOnly {
			e.providers[n] = p
		}
	}
	for n, r := range s.Routes {
		if r.ReadOnly {
			e.routes[n] = r
		}
	}
	for n, g := range s.Groups {
		if g.ReadOnly {
			e.groups[n] = g
		}
	}
	for n, k := range s.Keys {
		if k.ReadOnly {
			e.keys[n] = k
		}
	}
	for n, m := range s.Models {
		if m.ReadOnly {
			e.models[n] = m
		}
	}
	return e
}

// withAdopted adds to owned the entries of s the admin API created under
// a name want declares: the sync makes the file their owner, and the diff
// shows that ("managed_by: api → file") instead of a creation.
func withAdopted(owned fileEntries, s *State, want fileEntries) fileEntries {
	adopt(owned.providers, s.Providers, want.providers, func(p config.Provider) bool { return p.ReadOnly })
	adopt(owned.routes, s.Routes, want.routes, func(r config.Route) bool { return r.ReadOnly })
	adopt(owned.groups, s.Groups, want.groups, func(g config.ProviderGroup) bool { return g.ReadOnly })
	adopt(owned.keys, s.Keys, want.keys, func(k APIKey) bool { return k.ReadOnly })
	adopt(owned.models, s.Models, want.models, func(m config.ModelPrice) bool { return m.ReadOnly })
	return owned
}

// adopt copies into owned the entries of all that want names and that are
// not file-owned.
func adopt[V, W any](owned, all map[string]V, want map[string]W, fileOwned func(V) bool) {
	for n := range want {
		if e, ok := all[n]; ok && !fileOwned(e) {
			owned[n] = e
		}
	}
}

// FileRevisionOf returns the revision of what c declares: its generation
// and the SHA-256 of the declared entries in a canonical encoding (so
// comments, ordering and the local tuning sections do not change it).
func FileRevisionOf(c *config.Config) FileRevision {
	e := declaredEntries(c).toPB()
	msg := &raftstore.FileSync{PutProviders: e.providers, PutRoutes: e.routes, PutGroups: e.groups, PutKeys: e.keys,
		PutModels: e.models}
	admissionRevision(msg, c)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		panic(fmt.Sprintf("cluster: encoding file entries: %v", err)) // cannot fail for these messages
	}
	sum := sha256.Sum256(b)
	var gen uint64
	if c != nil && c.Generation > 0 {
		gen = uint64(c.Generation)
	}
	return FileRevision{Generation: gen, SHA256: hex.EncodeToString(sum[:])}
}

func revisionToPB(r FileRevision) *raftstore.FileRevision {
	return &raftstore.FileRevision{Generation: r.Generation, Sha256: r.SHA256}
}

func revisionFromPB(r *raftstore.FileRevision) FileRevision {
	return FileRevision{Generation: r.GetGeneration(), SHA256: r.GetSha256()}
}

// FilePlan is the difference between a rolter.toml and the stored state.
type FilePlan struct {
	// From is the stored revision, To the file's.
	From FileRevision `json:"from"`
	To   FileRevision `json:"to"`
	// Changes lists what syncing changes, one line per entry or field:
	// "+ provider/a api_base=http://…", "~ provider/a api_base: old → new",
	// "- route/chat". Empty when the entries are equal.
	Changes []string `json:"changes"`
	// Sync is the command payload; nil when nothing changes or the rule
	// refuses the file (Err).
	Sync *raftstore.FileSync `json:"-"`
	// Err is the generation rule's refusal (wraps ErrFileRefused).
	Err error `json:"-"`
}

// PlanFileSync computes what syncing c into st would change.
func PlanFileSync(st *State, c *config.Config) FilePlan {
	p := FilePlan{From: st.File, To: FileRevisionOf(c)}
	have, want := ownedEntries(st), declaredEntries(c)
	p.Changes = append(diffEntries(withAdopted(have, st, want), want), planAdmission(nil, st, c)...)
	changed, err := CheckRevision(p.From, p.To)
	if err != nil || !changed {
		p.Err = err
		return p
	}
	fs := &raftstore.FileSync{Revision: revisionToPB(p.To), Base: revisionToPB(p.From)}
	for _, n := range changedNames(want.providers, st.Providers, providerEqual) {
		fs.PutProviders = append(fs.PutProviders, providerToPB(want.providers[n]))
	}
	for _, n := range changedNames(want.routes, st.Routes, routeEqual) {
		fs.PutRoutes = append(fs.PutRoutes, routeToPB(want.routes[n]))
	}
	for _, n := range changedNames(want.groups, st.Groups, groupEqual) {
		fs.PutGroups = append(fs.PutGroups, groupToPB(want.groups[n]))
	}
	for _, n := range changedNames(want.keys, st.Keys, keyEqual) {
		fs.PutKeys = append(fs.PutKeys, keyToPB(want.keys[n]))
	}
	for _, n := range changedNames(want.models, st.Models, modelEqual) {
		fs.PutModels = append(fs.PutModels, modelPriceToPB(want.models[n]))
	}
	fs.DeleteProviders = removedNames(have.providers, want.providers)
	fs.DeleteRoutes = removedNames(have.routes, want.routes)
	fs.DeleteGroups = removedNames(have.groups, want.groups)
	fs.DeleteKeys = removedNames(have.keys, want.keys)
	fs.DeleteModels = removedNames(have.models, want.models)
	planAdmission(fs, st, c)
	p.Sync = fs
	return p
}

// changedNames lists, sorted, the names want declares whose stored entry
// (in all) differs or is missing. An entry the admin API created under a
// name the file declares differs (it is not read-only): the file adopts it.
func changedNames[V any](want, all map[string]V, eq func(a, b V) bool) []string {
	var out []string
	for n, w := range want {
		if a, ok := all[n]; ok && eq(a, w) {
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// removedNames lists, sorted, the file-owned names want no longer has.
func removedNames[V any](have, want map[string]V) []string {
	var out []string
	for n := range have {
		if _, ok := want[n]; !ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Entries compare by their wire form, so a field added to an entry later
// takes part without touching this file.

func providerEqual(a, b config.Provider) bool { return proto.Equal(providerToPB(a), providerToPB(b)) }

func routeEqual(a, b config.Route) bool { return proto.Equal(routeToPB(a), routeToPB(b)) }

func groupEqual(a, b config.ProviderGroup) bool { return proto.Equal(groupToPB(a), groupToPB(b)) }

func keyEqual(a, b APIKey) bool { return proto.Equal(keyToPB(a), keyToPB(b)) }

func modelEqual(a, b config.ModelPrice) bool {
	return proto.Equal(modelPriceToPB(a), modelPriceToPB(b))
}

// field is one named, rendered field of an entry, for the diff.
type field struct{ name, value string }

func providerFields(p config.Provider) []field {
	return []field{{"api_base", p.APIBase}, {"api_key_env", p.APIKeyEnv},
		{"price_in_per_mtok", fmtFloat(p.PriceInPerMtok)}, {"price_out_per_mtok", fmtFloat(p.PriceOutPerMtok)}}
}

func routeFields(r config.Route) []field {
	return []field{{"strategy", r.Strategy}, {"targets", fmtTargets(r.Targets)},
		{"discover", strconv.FormatBool(r.Discover)}, {"max_loras", strconv.Itoa(r.MaxLoRAs)}}
}

func groupFields(g config.ProviderGroup) []field {
	return []field{{"slug", g.Slug}, {"strategy", g.Strategy}, {"members", fmtTargets(g.Members)},
		{"max_loras", strconv.Itoa(g.MaxLoRAs)}}
}

// keyFields never renders the key's hash, only whether it changed.
func keyFields(k APIKey) []field {
	return []field{{"sha256", "sha256:" + hashTag(k.SHA256)}, {"models", "[" + strings.Join(k.Models, ", ") + "]"}}
}

func modelFields(m config.ModelPrice) []field {
	return []field{{"price_in_per_mtok", fmtFloat(m.PriceInPerMtok)}, {"price_out_per_mtok", fmtFloat(m.PriceOutPerMtok)}}
}

// hashTag is a stable, non-reversible tag of a key hash for the diff: it
// says "changed" without showing the stored digest.
func hashTag(sum string) string {
	t := sha256.Sum256([]byte("rolter-diff\x00" + sum))
	return hex.EncodeToString(t[:4])
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func fmtTargets(ts []config.Target) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = fmt.Sprintf("%s:%s×%d", t.Provider, t.Model, t.Weight)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// diffEntries renders the difference from have to want, sorted by kind
// and name.
func diffEntries(have, want fileEntries) []string {
	var out []string
	out = appendDiff(out, "provider", have.providers, want.providers, kindOf(providerFields, providerEqual,
		func(p config.Provider) bool { return p.ReadOnly }))
	out = appendDiff(out, "route", have.routes, want.routes, kindOf(routeFields, routeEqual,
		func(r config.Route) bool { return r.ReadOnly }))
	out = appendDiff(out, "provider_group", have.groups, want.groups, kindOf(groupFields, groupEqual,
		func(g config.ProviderGroup) bool { return g.ReadOnly }))
	out = appendDiff(out, "key", have.keys, want.keys, kindOf(keyFields, keyEqual, func(k APIKey) bool { return k.ReadOnly }))
	out = appendDiff(out, "model", have.models, want.models, kindOf(modelFields, modelEqual,
		func(m config.ModelPrice) bool { return m.ReadOnly }))
	return out
}

// entryKind is how the diff reads one kind of entry.
type entryKind[V any] struct {
	fields    func(V) []field
	equal     func(a, b V) bool
	fileOwned func(V) bool
}

func kindOf[V any](fields func(V) []field, equal func(a, b V) bool, fileOwned func(V) bool) entryKind[V] {
	return entryKind[V]{fields, equal, fileOwned}
}

func appendDiff[V any](out []string, kind string, have, want map[string]V, k entryKind[V]) []string {
	names := make([]string, 0, len(have)+len(want))
	for n := range have {
		names = append(names, n)
	}
	for n := range want {
		if _, ok := have[n]; !ok {
			names = append(names, n)
		}
	}
	slices.SortFunc(names, cmp.Compare)
	for _, n := range names {
		h, inHave := have[n]
		w, inWant := want[n]
		switch {
		case !inWant:
			out = append(out, fmt.Sprintf("- %s/%s", kind, n))
		case !inHave:
			var parts []string
			for _, f := range k.fields(w) {
				parts = append(parts, f.name+"="+f.value)
			}
			out = append(out, fmt.Sprintf("+ %s/%s %s", kind, n, strings.Join(parts, " ")))
		default:
			before := len(out)
			if !k.fileOwned(h) && k.fileOwned(w) {
				out = append(out, fmt.Sprintf("~ %s/%s managed_by: api → file", kind, n))
			}
			hf, wf := k.fields(h), k.fields(w)
			for i := range wf {
				if hf[i].value != wf[i].value {
					out = append(out, fmt.Sprintf("~ %s/%s %s: %s → %s", kind, n, wf[i].name, hf[i].value, wf[i].value))
				}
			}
			if len(out) == before && !k.equal(h, w) {
				out = append(out, fmt.Sprintf("~ %s/%s (a field this diff does not render changed)", kind, n))
			}
		}
	}
	return out
}

// fileSync applies a FileSync to s (a fresh clone the FSM owns). It
// returns the result, the diff lines for the audit, and unchanged when
// the file was already applied (nothing to audit, no version bump). On
// any refusal s is left as it was.
func (s *State) fileSync(fs *raftstore.FileSync) (res *raftstore.Result, diff []string, unchanged bool) {
	want, base := revisionFromPB(fs.GetRevision()), revisionFromPB(fs.GetBase())
	changed, err := CheckRevision(s.File, want)
	if err != nil {
		return fail(raftstore.Code_CODE_CONFLICT, "%s", err.Error()), nil, false
	}
	if !changed {
		return &raftstore.Result{Message: "unchanged", Unchanged: true}, nil, true
	}
	if base != s.File {
		return fail(raftstore.Code_CODE_CONFLICT, "computed against %s but the cluster is at %s; recompute the difference",
			base, s.File), nil, false
	}
	puts := newFileEntries()
	for _, p := range fs.GetPutProviders() {
		puts.providers[p.GetName()] = config.Provider{}
	}
	for _, r := range fs.GetPutRoutes() {
		puts.routes[r.GetModel()] = config.Route{}
	}
	for _, g := range fs.GetPutGroups() {
		puts.groups[g.GetName()] = config.ProviderGroup{}
	}
	for _, k := range fs.GetPutKeys() {
		puts.keys[k.GetName()] = APIKey{}
	}
	for _, m := range fs.GetPutModels() {
		puts.models[m.GetModel()] = config.ModelPrice{}
	}
	before := withAdopted(ownedEntries(s), s, puts)
	n := *s
	n.Providers, n.Routes, n.Groups, n.Keys = cloneMap(s.Providers), cloneMap(s.Routes), cloneMap(s.Groups), cloneMap(s.Keys)
	n.Models = cloneMap(s.Models)
	for _, name := range fs.GetDeleteProviders() {
		if !n.Providers[name].ReadOnly {
			return fail(raftstore.Code_CODE_INVALID, "provider %q is not owned by rolter.toml", name), nil, false
		}
		delete(n.Providers, name)
	}
	for _, name := range fs.GetDeleteRoutes() {
		if !n.Routes[name].ReadOnly {
			return fail(raftstore.Code_CODE_INVALID, "route %q is not owned by rolter.toml", name), nil, false
		}
		delete(n.Routes, name)
	}
	for _, name := range fs.GetDeleteGroups() {
		if !n.Groups[name].ReadOnly {
			return fail(raftstore.Code_CODE_INVALID, "provider group %q is not owned by rolter.toml", name), nil, false
		}
		delete(n.Groups, name)
	}
	for _, name := range fs.GetDeleteKeys() {
		if !n.Keys[name].ReadOnly {
			return fail(raftstore.Code_CODE_INVALID, "key %q is not owned by rolter.toml", name), nil, false
		}
		delete(n.Keys, name)
	}
	for _, name := range fs.GetDeleteModels() {
		if !n.Models[name].ReadOnly {
			return fail(raftstore.Code_CODE_INVALID, "model price %q is not owned by rolter.toml", name), nil, false
		}
		delete(n.Models, name)
	}
	for _, p := range fs.GetPutProviders() {
		v := providerFromPB(p)
		v.ReadOnly = true
		n.Providers[v.Name] = v
	}
	for _, r := range fs.GetPutRoutes() {
		v := routeFromPB(r)
		v.ReadOnly = true
		n.Routes[v.Model] = v
	}
	for _, g := range fs.GetPutGroups() {
		v := groupFromPB(g)
		v.ReadOnly = true
		n.Groups[v.Name] = v
	}
	for _, k := range fs.GetPutKeys() {
		v := keyFromPB(k)
		v.ReadOnly = true
		n.Keys[v.Name] = v
	}
	for _, m := range fs.GetPutModels() {
		v := modelPriceFromPB(m)
		if v.Model == "" {
			return fail(raftstore.Code_CODE_INVALID, "model price: model required"), nil, false
		}
		if f, err := config.CheckPrices(v.PriceInPerMtok, v.PriceOutPerMtok); err != nil {
			return fail(raftstore.Code_CODE_INVALID, "model price %q: %s: %s", v.Model, f, err.Error()), nil, false
		}
		v.ReadOnly = true
		n.Models[v.Model] = v
	}
	if msg := n.danglingReference(); msg != "" {
		return fail(raftstore.Code_CODE_INVALID, "%s", msg), nil, false
	}
	res, admDiff := applyFileAdmission(&n, fs)
	if res != nil {
		return res, nil, false
	}
	diff = append(diffEntries(before, ownedEntries(&n)), admDiff...)
	if len(diff) == 0 {
		diff = []string{fmt.Sprintf("revision %s → %s, entries unchanged", s.File, want)}
	}
	n.File = want
	*s = n
	return &raftstore.Result{}, diff, false
}

// danglingReference checks what a FileSync could break: every route
// target and group member names a provider, and no group slug is a
// provider name or another group's slug. It returns the first problem
// ("" when none).
func (s *State) danglingReference() string {
	owner := func(ro bool) string {
		if ro {
			return "rolter.toml"
		}
		return "the admin API"
	}
	for _, r := range s.RouteList() {
		for _, t := range r.Targets {
			if _, ok := s.Providers[t.Provider]; !ok {
				return fmt.Sprintf("route %q (from %s) targets provider %q, which would no longer exist", r.Model, owner(r.ReadOnly), t.Provider)
			}
		}
	}
	slugs := map[string]string{}
	for _, g := range s.GroupList() {
		for _, m := range g.Members {
			if _, ok := s.Providers[m.Provider]; !ok {
				return fmt.Sprintf("provider group %q (from %s) has member %q, which would no longer exist", g.Name, owner(g.ReadOnly), m.Provider)
			}
		}
		if _, ok := s.Providers[g.Slug]; ok {
			return fmt.Sprintf("provider group %q: slug %q collides with a provider", g.Name, g.Slug)
		}
		if o, ok := slugs[g.Slug]; ok {
			return fmt.Sprintf("provider groups %q and %q share slug %q", o, g.Name, g.Slug)
		}
		slugs[g.Slug] = g.Name
	}
	return ""
}
