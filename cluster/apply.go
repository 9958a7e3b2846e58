package cluster

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/rolter/rolter/cluster/raftstore"
	"github.com/rolter/rolter/config"
	"google.golang.org/protobuf/proto"
)

// This file is the deterministic heart of the FSM: given a state and a
// command it returns the next state and the result. It runs on every
// router for every log entry, so it reads nothing but its arguments.

// opSpec describes one operation: the role it needs, its audit action and
// resource kind.
type opSpec struct {
	role   Role
	action string
	kind   string
}

var ops = map[raftstore.Op]opSpec{
	raftstore.Op_OP_CREATE_PROVIDER:    {RoleAdmin, "provider.create", "provider"},
	raftstore.Op_OP_UPDATE_PROVIDER:    {RoleAdmin, "provider.update", "provider"},
	raftstore.Op_OP_DELETE_PROVIDER:    {RoleAdmin, "provider.delete", "provider"},
	raftstore.Op_OP_CREATE_ROUTE:       {RoleAdmin, "route.create", "route"},
	raftstore.Op_OP_UPDATE_ROUTE:       {RoleAdmin, "route.update", "route"},
	raftstore.Op_OP_DELETE_ROUTE:       {RoleAdmin, "route.delete", "route"},
	raftstore.Op_OP_CREATE_GROUP:       {RoleAdmin, "provider_group.create", "provider_group"},
	raftstore.Op_OP_UPDATE_GROUP:       {RoleAdmin, "provider_group.update", "provider_group"},
	raftstore.Op_OP_DELETE_GROUP:       {RoleAdmin, "provider_group.delete", "provider_group"},
	raftstore.Op_OP_CREATE_KEY:         {RoleAdmin, "key.create", "key"},
	raftstore.Op_OP_DELETE_KEY:         {RoleAdmin, "key.delete", "key"},
	raftstore.Op_OP_CREATE_TOKEN:       {RoleSuperadmin, "admin_token.create", "admin_token"},
	raftstore.Op_OP_DELETE_TOKEN:       {RoleSuperadmin, "admin_token.delete", "admin_token"},
	raftstore.Op_OP_SET_POLICY:         {RoleSuperadmin, "adaptive_routing_policy.update", "adaptive_routing_policy"},
	raftstore.Op_OP_SET_MODEL_PRICE:    {RoleAdmin, "model_price.set", "model_price"},
	raftstore.Op_OP_DELETE_MODEL_PRICE: {RoleAdmin, "model_price.delete", "model_price"},
	raftstore.Op_OP_SEED:               {RoleNone, "config.seed", "config"},
	raftstore.Op_OP_FILE_SYNC:          {RoleAdmin, "config.file_sync", "config"},
	raftstore.Op_OP_SET_ADMISSION:      {RoleSuperadmin, "admission.update", "admission"},
	raftstore.Op_OP_SET_KEY_PRIORITY:   {RoleAdmin, "key.priority", "key"},
}

// actionName returns the audit action of op, e.g.
// "adaptive_routing_policy.update".
func actionName(op raftstore.Op) string { return ops[op].action }

func fail(code raftstore.Code, format string, a ...any) *raftstore.Result {
	return &raftstore.Result{Code: code, Message: fmt.Sprintf(format, a...)}
}

// applyCommand derives the state after cmd. The returned state is always a
// new value when anything (audit, idempotency record) changed.
func applyCommand(s *State, cmd *raftstore.Command, index uint64) (*State, *raftstore.Result) {
	idemKey := ""
	if k := cmd.GetIdempotencyKey(); k != "" {
		idemKey = cmd.GetActorTokenSha256() + "\x00" + k
		if r, ok := s.idem.get(idemKey); ok {
			replay := proto.CloneOf(r)
			replay.Replayed = true
			return s, replay
		}
	}
	spec, known := ops[cmd.GetOp()]
	n := s.clone()
	n.AppliedIndex = index
	var res *raftstore.Result
	var diff []string
	unchanged := false
	actor := cmd.GetActor()
	switch {
	case !known:
		res = fail(raftstore.Code_CODE_INVALID, "unknown operation %d", cmd.GetOp())
	case cmd.GetOp() == raftstore.Op_OP_SEED:
		actor = "system"
		res = n.seed(cmd.GetSeed())
	case cmd.GetOp() == raftstore.Op_OP_FILE_SYNC && cmd.GetActorTokenSha256() == "":
		actor = cmp.Or(cmd.GetFileSync().GetOrigin(), "system")
		res, diff, unchanged = n.fileSync(cmd.GetFileSync())
	default:
		role, name := s.TokenRole(cmd.GetActorTokenSha256())
		if name != "" {
			actor = name
		}
		switch {
		case role == RoleNone:
			res = fail(raftstore.Code_CODE_UNAUTHENTICATED, "unknown admin token")
		case role < spec.role:
			res = fail(raftstore.Code_CODE_FORBIDDEN, "%s requires the %s role (token %q has %s)", spec.action, spec.role, name, role)
		case cmd.GetOp() == raftstore.Op_OP_FILE_SYNC:
			res, diff, unchanged = n.fileSync(cmd.GetFileSync())
		default:
			res = n.mutate(cmd)
		}
	}
	if res.GetCode() == raftstore.Code_CODE_OK && cmd.GetOp() != raftstore.Op_OP_SEED && !unchanged {
		n.ConfigVersion++
	}
	res.ConfigVersion = n.ConfigVersion
	// A file sync that finds its file applied already (another router
	// sent it first) changed nothing and is not audited.
	if !unchanged {
		e := AuditEntry{Time: fromNanos(cmd.GetTimeUnixNano()), Actor: actor, Action: spec.action,
			Resource: resourceName(spec.kind, cmd), Outcome: outcome(res), ConfigVersion: n.ConfigVersion, Diff: diff}
		if cmd.GetOp() == raftstore.Op_OP_SET_POLICY {
			// Deterministic on every node: struct fields in order, sorted routes.
			e.Detail, _ = json.Marshal(PolicyChange{Before: s.Policy.Policy,
				After: policyFromPB(cmd.GetPolicy()).Policy, AffectedRoutes: n.AffectedRoutes()})
		}
		n.audit(e)
	}
	if idemKey != "" {
		n.idem = n.idem.put(idemKey, res)
	}
	return n, res
}

func outcome(r *raftstore.Result) string {
	if r.GetCode() == raftstore.Code_CODE_OK {
		return "ok"
	}
	return strings.TrimPrefix(strings.ToLower(r.GetCode().String()), "code_")
}

// resourceName names the resource a command touches, for the audit log;
// it never includes a secret or a token hash.
func resourceName(kind string, cmd *raftstore.Command) string {
	var name string
	switch p := cmd.GetPayload().(type) {
	case *raftstore.Command_Name:
		name = p.Name
	case *raftstore.Command_Provider:
		name = p.Provider.GetName()
	case *raftstore.Command_Route:
		name = p.Route.GetModel()
	case *raftstore.Command_Group:
		name = p.Group.GetName()
	case *raftstore.Command_Key:
		name = p.Key.GetName()
	case *raftstore.Command_Token:
		name = p.Token.GetName()
	case *raftstore.Command_ModelPrice:
		name = p.ModelPrice.GetModel()
	case *raftstore.Command_KeyPriority:
		name = p.KeyPriority.GetName()
	}
	if name == "" {
		return kind
	}
	return kind + "/" + name
}

func (s *State) audit(e AuditEntry) {
	s.auditSeq++
	e.Seq = s.auditSeq
	// Appending never overwrites what an older State sees (one successor
	// per state); trimming the front keeps the log bounded.
	a := append(s.Audit, e)
	if len(a) > AuditCapacity {
		a = a[len(a)-AuditCapacity:]
	}
	s.Audit = a
}

func (s *State) seed(sd *raftstore.Seed) *raftstore.Result {
	if s.Seeded {
		return fail(raftstore.Code_CODE_CONFLICT, "already seeded")
	}
	s.Providers, s.Routes, s.Groups = cloneMap(s.Providers), cloneMap(s.Routes), cloneMap(s.Groups)
	s.Keys, s.Tokens, s.Models = cloneMap(s.Keys), cloneMap(s.Tokens), cloneMap(s.Models)
	for _, m := range sd.GetModels() {
		s.Models[m.GetModel()] = modelPriceFromPB(m)
	}
	for _, p := range sd.GetProviders() {
		s.Providers[p.GetName()] = providerFromPB(p)
	}
	for _, r := range sd.GetRoutes() {
		s.Routes[r.GetModel()] = routeFromPB(r)
	}
	for _, g := range sd.GetGroups() {
		s.Groups[g.GetName()] = groupFromPB(g)
	}
	for _, k := range sd.GetKeys() {
		s.Keys[k.GetName()] = keyFromPB(k)
	}
	for _, t := range sd.GetTokens() {
		s.Tokens[t.GetSha256()] = tokenFromPB(t)
	}
	if sd.GetPolicy() != nil {
		s.Policy = policyFromPB(sd.GetPolicy())
	}
	if sd.GetAdmission() != nil {
		s.Admission = admissionFromPB(sd.GetAdmission())
		s.Admission.ReadOnly = true
	}
	s.File = revisionFromPB(sd.GetRevision())
	s.Seeded = true
	s.ConfigVersion++
	return &raftstore.Result{}
}

func (s *State) mutate(cmd *raftstore.Command) *raftstore.Result {
	switch cmd.GetOp() {
	case raftstore.Op_OP_CREATE_PROVIDER, raftstore.Op_OP_UPDATE_PROVIDER:
		return s.putProvider(cmd.GetProvider(), cmd.GetOp() == raftstore.Op_OP_CREATE_PROVIDER)
	case raftstore.Op_OP_DELETE_PROVIDER:
		return s.deleteProvider(cmd.GetName())
	case raftstore.Op_OP_CREATE_ROUTE, raftstore.Op_OP_UPDATE_ROUTE:
		return s.putRoute(cmd.GetRoute(), cmd.GetOp() == raftstore.Op_OP_CREATE_ROUTE)
	case raftstore.Op_OP_DELETE_ROUTE:
		r, ok := s.Routes[cmd.GetName()]
		if res := existsWritable("route", cmd.GetName(), ok, r.ReadOnly); res != nil {
			return res
		}
		s.Routes = cloneMap(s.Routes)
		delete(s.Routes, cmd.GetName())
	case raftstore.Op_OP_CREATE_GROUP, raftstore.Op_OP_UPDATE_GROUP:
		return s.putGroup(cmd.GetGroup(), cmd.GetOp() == raftstore.Op_OP_CREATE_GROUP)
	case raftstore.Op_OP_DELETE_GROUP:
		g, ok := s.Groups[cmd.GetName()]
		if res := existsWritable("provider group", cmd.GetName(), ok, g.ReadOnly); res != nil {
			return res
		}
		s.Groups = cloneMap(s.Groups)
		delete(s.Groups, cmd.GetName())
	case raftstore.Op_OP_CREATE_KEY:
		k := keyFromPB(cmd.GetKey())
		if _, ok := s.Keys[k.Name]; ok {
			return fail(raftstore.Code_CODE_CONFLICT, "key %q already exists", k.Name)
		}
		if k.Name == "" || len(k.SHA256) != 64 {
			return fail(raftstore.Code_CODE_INVALID, "a key needs a name and a 64-hex-digit sha256")
		}
		k.Created = fromNanos(cmd.GetTimeUnixNano())
		k.ReadOnly = false
		s.Keys = cloneMap(s.Keys)
		s.Keys[k.Name] = k
	case raftstore.Op_OP_DELETE_KEY:
		k, ok := s.Keys[cmd.GetName()]
		if res := existsWritable("key", cmd.GetName(), ok, k.ReadOnly); res != nil {
			return res
		}
		s.Keys = cloneMap(s.Keys)
		delete(s.Keys, cmd.GetName())
	case raftstore.Op_OP_CREATE_TOKEN:
		t := tokenFromPB(cmd.GetToken())
		if t.Name == "" || len(t.SHA256) != 64 || t.Role == RoleNone {
			return fail(raftstore.Code_CODE_INVALID, "a token needs a name, a 64-hex-digit sha256 and a role")
		}
		for _, o := range s.Tokens {
			if o.Name == t.Name {
				return fail(raftstore.Code_CODE_CONFLICT, "admin token %q already exists", t.Name)
			}
		}
		t.ReadOnly = false
		s.Tokens = cloneMap(s.Tokens)
		s.Tokens[t.SHA256] = t
	case raftstore.Op_OP_DELETE_TOKEN:
		for sum, o := range s.Tokens {
			if o.Name == cmd.GetName() {
				if o.ReadOnly {
					return fail(raftstore.Code_CODE_READONLY, "admin token %q is readonly", o.Name)
				}
				s.Tokens = cloneMap(s.Tokens)
				delete(s.Tokens, sum)
				return &raftstore.Result{}
			}
		}
		return fail(raftstore.Code_CODE_NOT_FOUND, "no admin token %q", cmd.GetName())
	case raftstore.Op_OP_SET_MODEL_PRICE:
		m := modelPriceFromPB(cmd.GetModelPrice())
		if m.Model == "" {
			return fail(raftstore.Code_CODE_INVALID, "model: required")
		}
		if f, err := config.CheckPrices(m.PriceInPerMtok, m.PriceOutPerMtok); err != nil {
			return fail(raftstore.Code_CODE_INVALID, "%s: %s", f, err.Error())
		}
		if old, ok := s.Models[m.Model]; ok {
			if res := existsWritable("model price", m.Model, ok, old.ReadOnly); res != nil {
				return res
			}
		}
		m.ReadOnly = false
		s.Models = cloneMap(s.Models)
		s.Models[m.Model] = m
	case raftstore.Op_OP_DELETE_MODEL_PRICE:
		m, ok := s.Models[cmd.GetName()]
		if res := existsWritable("model price", cmd.GetName(), ok, m.ReadOnly); res != nil {
			return res
		}
		s.Models = cloneMap(s.Models)
		delete(s.Models, cmd.GetName())
	case raftstore.Op_OP_SET_POLICY:
		p := policyFromPB(cmd.GetPolicy())
		if err := config.ValidatePolicy(p.Policy); err != nil {
			return fail(raftstore.Code_CODE_INVALID, "%s", err.Error())
		}
		p.UpdatedAt = fromNanos(cmd.GetTimeUnixNano())
		s.Policy = p
	case raftstore.Op_OP_SET_ADMISSION:
		if res := s.setAdmission(cmd.GetAdmission()); res != nil {
			return res
		}
	case raftstore.Op_OP_SET_KEY_PRIORITY:
		if res := s.setKeyPriority(cmd.GetKeyPriority()); res != nil {
			return res
		}
	}
	return &raftstore.Result{}
}

func existsWritable(kind, name string, ok, readonly bool) *raftstore.Result {
	if !ok {
		return fail(raftstore.Code_CODE_NOT_FOUND, "no %s %q", kind, name)
	}
	if readonly {
		return fail(raftstore.Code_CODE_READONLY, "%s %q is managed by rolter.toml and read-only in the admin API: "+
			"change it in rolter.toml and raise its generation", kind, name)
	}
	return nil
}

func (s *State) putProvider(pb *raftstore.Provider, create bool) *raftstore.Result {
	p := providerFromPB(pb)
	if p.Name == "" {
		return fail(raftstore.Code_CODE_INVALID, "name: required")
	}
	old, ok := s.Providers[p.Name]
	if create && ok {
		return fail(raftstore.Code_CODE_CONFLICT, "provider %q already exists", p.Name)
	}
	if !create {
		if res := existsWritable("provider", p.Name, ok, old.ReadOnly); res != nil {
			return res
		}
	}
	for _, g := range s.Groups {
		if g.Slug == p.Name {
			return fail(raftstore.Code_CODE_CONFLICT, "name %q is the slug of provider group %q", p.Name, g.Name)
		}
	}
	p.ReadOnly = false
	s.Providers = cloneMap(s.Providers)
	s.Providers[p.Name] = p
	return &raftstore.Result{}
}

func (s *State) deleteProvider(name string) *raftstore.Result {
	p, ok := s.Providers[name]
	if res := existsWritable("provider", name, ok, p.ReadOnly); res != nil {
		return res
	}
	for _, r := range s.RouteList() {
		if slices.ContainsFunc(r.Targets, func(t config.Target) bool { return t.Provider == name }) {
			return fail(raftstore.Code_CODE_CONFLICT, "provider %q is a target of route %q", name, r.Model)
		}
	}
	for _, g := range s.GroupList() {
		if slices.ContainsFunc(g.Members, func(t config.Target) bool { return t.Provider == name }) {
			return fail(raftstore.Code_CODE_CONFLICT, "provider %q is a member of group %q", name, g.Name)
		}
	}
	s.Providers = cloneMap(s.Providers)
	delete(s.Providers, name)
	return &raftstore.Result{}
}

func (s *State) checkTargets(field string, ts []config.Target) *raftstore.Result {
	for i, t := range ts {
		if _, ok := s.Providers[t.Provider]; !ok {
			return fail(raftstore.Code_CODE_INVALID, "%s[%d].provider: no provider named %q", field, i, t.Provider)
		}
		if t.Weight < 1 {
			return fail(raftstore.Code_CODE_INVALID, "%s[%d].weight: must be an integer ≥ 1", field, i)
		}
	}
	return nil
}

func (s *State) putRoute(pb *raftstore.Route, create bool) *raftstore.Result {
	r := routeFromPB(pb)
	if r.Model == "" {
		return fail(raftstore.Code_CODE_INVALID, "model: required")
	}
	old, ok := s.Routes[r.Model]
	if create && ok {
		return fail(raftstore.Code_CODE_CONFLICT, "route %q already exists", r.Model)
	}
	if !create {
		if res := existsWritable("route", r.Model, ok, old.ReadOnly); res != nil {
			return res
		}
	}
	if len(r.Targets) == 0 && !r.Discover {
		return fail(raftstore.Code_CODE_INVALID, "targets: at least one target is required (or set discover = true)")
	}
	if res := s.checkTargets("targets", r.Targets); res != nil {
		return res
	}
	r.ReadOnly = false
	s.Routes = cloneMap(s.Routes)
	s.Routes[r.Model] = r
	return &raftstore.Result{}
}

func (s *State) putGroup(pb *raftstore.ProviderGroup, create bool) *raftstore.Result {
	g := groupFromPB(pb)
	if g.Name == "" || g.Slug == "" {
		return fail(raftstore.Code_CODE_INVALID, "name and slug: required")
	}
	old, ok := s.Groups[g.Name]
	if create && ok {
		return fail(raftstore.Code_CODE_CONFLICT, "provider group %q already exists", g.Name)
	}
	if !create {
		if res := existsWritable("provider group", g.Name, ok, old.ReadOnly); res != nil {
			return res
		}
	}
	for _, o := range s.Groups {
		if o.Name != g.Name && o.Slug == g.Slug {
			return fail(raftstore.Code_CODE_CONFLICT, "slug %q is used by group %q", g.Slug, o.Name)
		}
	}
	if _, clash := s.Providers[g.Slug]; clash {
		return fail(raftstore.Code_CODE_CONFLICT, "slug %q collides with a provider: %q/model would be ambiguous", g.Slug, g.Slug)
	}
	if len(g.Members) == 0 {
		return fail(raftstore.Code_CODE_INVALID, "members: at least one member is required")
	}
	if res := s.checkTargets("members", g.Members); res != nil {
		return res
	}
	g.ReadOnly = false
	s.Groups = cloneMap(s.Groups)
	s.Groups[g.Name] = g
	return &raftstore.Result{}
}
