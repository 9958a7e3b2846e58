package adminapi

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/rolter/rolter/cluster"
	"github.com/rolter/rolter/config"
)

// JSON shapes of the CRUD resources.

type providerJSON struct {
	Name            string  `json:"name"`
	APIBase         string  `json:"api_base"`
	APIKeyEnv       string  `json:"api_key_env,omitempty"`
	PriceInPerMtok  float64 `json:"price_in_per_mtok"`
	PriceOutPerMtok float64 `json:"price_out_per_mtok"`
	ReadOnly        bool    `json:"readonly"`
	ManagedBy       string  `json:"managed_by"`
}

type targetJSON struct {
	Provider string `json:"provider"`
	Model    string `json:"model,omitempty"`
	// Weight is nil when the input leaves it out (then 1); always set on
	// output.
	Weight *int `json:"weight,omitempty"`
}

type routeJSON struct {
	Model    string       `json:"model"`
	Strategy string       `json:"strategy"`
	Targets  []targetJSON `json:"targets"`
	Discover bool         `json:"discover,omitempty"`
	MaxLoRAs int          `json:"max_loras,omitempty"`
	ReadOnly bool         `json:"readonly"`
	// ManagedBy is "file" for an entry rolter.toml declares (read-only
	// here) and "api" for one created through this API.
	ManagedBy string `json:"managed_by"`
	// Enabled defaults to true on create and to the stored value on
	// update; always set on output.
	Enabled *bool `json:"enabled,omitempty"`
	// ResumeStreams: absent inherits [retry] resume_streams.
	ResumeStreams *bool `json:"resume_streams,omitempty"`
}

type groupJSON struct {
	Name      string       `json:"name"`
	Slug      string       `json:"slug"`
	Strategy  string       `json:"strategy"`
	Members   []targetJSON `json:"members"`
	MaxLoRAs  int          `json:"max_loras,omitempty"`
	ReadOnly  bool         `json:"readonly"`
	ManagedBy string       `json:"managed_by"`
	// Enabled: as routeJSON.Enabled.
	Enabled *bool `json:"enabled,omitempty"`
	// ResumeStreams: absent inherits [retry] resume_streams.
	ResumeStreams *bool `json:"resume_streams,omitempty"`
}

type keyJSON struct {
	Name      string   `json:"name"`
	Models    []string `json:"models"`
	Providers []string `json:"providers"`
	// MaxPriority and FairnessHeader are the key's admission settings.
	MaxPriority    string    `json:"max_priority"`
	FairnessHeader bool      `json:"fairness_header"`
	ReadOnly       bool      `json:"readonly"`
	ManagedBy      string    `json:"managed_by"`
	CreatedAt      time.Time `json:"created_at,omitzero"`
	// Secret is set only in the response to the creating request.
	Secret string `json:"secret,omitempty"`
	Note   string `json:"note,omitempty"`
}

type tokenJSON struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	ReadOnly bool   `json:"readonly"`
	Secret   string `json:"secret,omitempty"`
	Note     string `json:"note,omitempty"`
}

// managedBy names who owns an entry: read-only entries are rolter.toml's.
func managedBy(readonly bool) string {
	if readonly {
		return "file"
	}
	return "api"
}

func providerOut(p config.Provider) providerJSON {
	return providerJSON{p.Name, p.APIBase, p.APIKeyEnv, p.PriceInPerMtok, p.PriceOutPerMtok, p.ReadOnly, managedBy(p.ReadOnly)}
}

func targetsOut(ts []config.Target) []targetJSON {
	out := make([]targetJSON, 0, len(ts))
	for _, t := range ts {
		w := t.Weight
		out = append(out, targetJSON{Provider: t.Provider, Model: t.Model, Weight: &w})
	}
	return out
}

// targetsIn converts input targets (list names them in errors: "targets"
// or "members"), defaulting the model to defModel and an omitted weight to
// 1; a weight below 1 is an error naming the entry.
func targetsIn(ts []targetJSON, defModel, list string) ([]config.Target, error) {
	out := make([]config.Target, 0, len(ts))
	for i, t := range ts {
		if t.Model == "" {
			t.Model = defModel
		}
		w := 1
		if t.Weight != nil {
			w = *t.Weight
		}
		if err := config.CheckWeight(w); err != nil {
			return nil, fmt.Errorf("%s[%d] (provider %q): weight: %w", list, i, t.Provider, err)
		}
		out = append(out, config.Target{Provider: t.Provider, Model: t.Model, Weight: w})
	}
	return out, nil
}

func routeOut(r config.Route) routeJSON {
	return routeJSON{r.Model, r.Strategy, targetsOut(r.Targets), r.Discover, r.MaxLoRAs, r.ReadOnly, managedBy(r.ReadOnly), config.Bool(r.IsEnabled()),
		r.ResumeStreams}
}

func groupOut(g config.ProviderGroup) groupJSON {
	return groupJSON{g.Name, g.Slug, g.Strategy, targetsOut(g.Members), g.MaxLoRAs, g.ReadOnly, managedBy(g.ReadOnly), config.Bool(g.IsEnabled()),
		g.ResumeStreams}
}

func keyOut(k cluster.APIKey) keyJSON {
	models, providers := k.Models, k.Providers
	if models == nil {
		models = []string{}
	}
	if providers == nil {
		providers = []string{}
	}
	band := k.MaxPriority
	if band == "" {
		band = "standard"
	}
	return keyJSON{Name: k.Name, Models: models, Providers: providers, MaxPriority: band, FairnessHeader: k.FairnessHeader,
		ReadOnly: k.ReadOnly, ManagedBy: managedBy(k.ReadOnly), CreatedAt: k.Created}
}

// ---- providers

func (a *API) validProvider(w http.ResponseWriter, p providerJSON) bool {
	if p.Name == "" {
		badRequest(w, "name: required")
		return false
	}
	if err := a.d.Limits.CheckBaseURL(p.APIBase); err != nil {
		badRequest(w, "api_base: "+err.Error())
		return false
	}
	for f, v := range map[string]float64{"price_in_per_mtok": p.PriceInPerMtok, "price_out_per_mtok": p.PriceOutPerMtok} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			badRequest(w, f+": must be a finite number ≥ 0")
			return false
		}
	}
	return true
}

func (a *API) createProvider(w http.ResponseWriter, r *http.Request, p principal) {
	a.writeProvider(w, r, p, "", Store.CreateProvider, http.StatusCreated)
}

func (a *API) updateProvider(w http.ResponseWriter, r *http.Request, p principal) {
	a.writeProvider(w, r, p, mux.Vars(r)["name"], Store.UpdateProvider, http.StatusOK)
}

func (a *API) writeProvider(w http.ResponseWriter, r *http.Request, p principal, name string,
	put func(Store, context.Context, cluster.Author, config.Provider) (cluster.Written, error), status int) {
	var in providerJSON
	if !decode(w, r, &in) {
		return
	}
	if name != "" {
		if in.Name != "" && in.Name != name {
			badRequest(w, "name: does not match the URL")
			return
		}
		in.Name = name
	}
	if !a.validProvider(w, in) {
		return
	}
	prov := config.Provider{Name: in.Name, APIBase: in.APIBase, APIKeyEnv: in.APIKeyEnv,
		PriceInPerMtok: in.PriceInPerMtok, PriceOutPerMtok: in.PriceOutPerMtok}
	_, err := put(a.d.Store, r.Context(), a.author(r, p), prov)
	if a.written(w, "provider "+prov.Name, err) {
		writeJSON(w, status, providerOut(prov))
	}
}

// ---- routes

func validStrategy(w http.ResponseWriter, name string) bool {
	if err := config.CheckStrategy(name); err != nil {
		badRequest(w, "strategy: "+err.Error())
		return false
	}
	return true
}

func (a *API) createRoute(w http.ResponseWriter, r *http.Request, p principal) {
	a.writeRoute(w, r, p, "", false, http.StatusCreated)
}

func (a *API) updateRoute(w http.ResponseWriter, r *http.Request, p principal) {
	a.writeRoute(w, r, p, mux.Vars(r)["name"], true, http.StatusOK)
}

// writeRoute creates a route, or updates the one named name (update).
func (a *API) writeRoute(w http.ResponseWriter, r *http.Request, p principal, name string, update bool, status int) {
	var in routeJSON
	if !decode(w, r, &in) {
		return
	}
	if name != "" {
		if in.Model != "" && in.Model != name {
			badRequest(w, "model: does not match the URL")
			return
		}
		in.Model = name
	}
	if in.Model == "" {
		badRequest(w, "model: required")
		return
	}
	if in.Strategy == "" {
		in.Strategy = "round_robin"
	}
	if !validStrategy(w, in.Strategy) {
		return
	}
	if err := config.CheckMaxLoRAs(in.MaxLoRAs); err != nil {
		badRequest(w, "max_loras: "+err.Error())
		return
	}
	targets, err := targetsIn(in.Targets, in.Model, "targets")
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	rt := config.Route{Model: in.Model, Strategy: in.Strategy, Targets: targets, Discover: in.Discover, MaxLoRAs: in.MaxLoRAs,
		Enabled: in.Enabled, ResumeStreams: in.ResumeStreams}
	if in.Enabled == nil && update {
		rt.Enabled = a.d.Store.State().Routes[in.Model].Enabled
	}
	if rt.IsEnabled() {
		rt.Enabled = nil
	}
	put := Store.CreateRoute
	if update {
		put = Store.UpdateRoute
	}
	_, err = put(a.d.Store, r.Context(), a.author(r, p), rt)
	if a.written(w, "route "+rt.Model, err) {
		writeJSON(w, status, routeOut(rt))
	}
}

// ---- provider groups

func (a *API) createGroup(w http.ResponseWriter, r *http.Request, p principal) {
	a.writeGroup(w, r, p, "", false, http.StatusCreated)
}

func (a *API) updateGroup(w http.ResponseWriter, r *http.Request, p principal) {
	a.writeGroup(w, r, p, mux.Vars(r)["name"], true, http.StatusOK)
}

// writeGroup creates a provider group, or updates the one named name
// (update).
func (a *API) writeGroup(w http.ResponseWriter, r *http.Request, p principal, name string, update bool, status int) {
	var in groupJSON
	if !decode(w, r, &in) {
		return
	}
	if name != "" {
		if in.Name != "" && in.Name != name {
			badRequest(w, "name: does not match the URL")
			return
		}
		in.Name = name
	}
	switch {
	case in.Name == "":
		badRequest(w, "name: required")
		return
	case in.Slug == "":
		badRequest(w, "slug: required")
		return
	case strings.ContainsAny(in.Slug, "/ \t"):
		badRequest(w, "slug: must not contain '/' or spaces")
		return
	}
	if in.Strategy == "" {
		in.Strategy = "round_robin"
	}
	if !validStrategy(w, in.Strategy) {
		return
	}
	if err := config.CheckMaxLoRAs(in.MaxLoRAs); err != nil {
		badRequest(w, "max_loras: "+err.Error())
		return
	}
	members, err := targetsIn(in.Members, "", "members")
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	g := config.ProviderGroup{Name: in.Name, Slug: in.Slug, Strategy: in.Strategy, Members: members, MaxLoRAs: in.MaxLoRAs,
		Enabled: in.Enabled, ResumeStreams: in.ResumeStreams}
	if in.Enabled == nil && update {
		g.Enabled = a.d.Store.State().Groups[in.Name].Enabled
	}
	if g.IsEnabled() {
		g.Enabled = nil
	}
	put := Store.CreateGroup
	if update {
		put = Store.UpdateGroup
	}
	_, err = put(a.d.Store, r.Context(), a.author(r, p), g)
	if a.written(w, "provider group "+g.Name, err) {
		writeJSON(w, status, groupOut(g))
	}
}

// ---- keys and admin tokens

// newSecret returns a fresh random secret with prefix.
func (a *API) newSecret(prefix string) (string, error) {
	b := make([]byte, 32)
	if _, err := io.ReadFull(a.d.Random, b); err != nil {
		return "", err
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b), nil
}

const shownOnce = "the secret is shown only in the response that created it"

func (a *API) createKey(w http.ResponseWriter, r *http.Request, p principal) {
	var in struct {
		Name           string   `json:"name"`
		Models         []string `json:"models"`
		Providers      []string `json:"providers"`
		MaxPriority    string   `json:"max_priority"`
		FairnessHeader bool     `json:"fairness_header"`
	}
	if !decode(w, r, &in) {
		return
	}
	if in.Name == "" {
		badRequest(w, "name: required")
		return
	}
	if !config.ValidPriority(in.MaxPriority) {
		badRequest(w, "max_priority: must be critical, standard or sheddable")
		return
	}
	known := a.d.Store.State().Providers
	for i, p := range in.Providers {
		if _, ok := known[p]; !ok {
			badRequest(w, fmt.Sprintf("providers[%d]: no provider named %q", i, p))
			return
		}
	}
	secret, err := a.newSecret("sk-rolter-")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "cannot generate a key", "server_error", "internal_error")
		return
	}
	k := cluster.APIKey{Name: in.Name, SHA256: cluster.HashToken(secret), Models: in.Models, Providers: in.Providers,
		MaxPriority: in.MaxPriority, FairnessHeader: in.FairnessHeader}
	res, err := a.d.Store.CreateKey(r.Context(), a.author(r, p), k)
	if !a.written(w, "key "+k.Name, err) {
		return
	}
	out := keyOut(a.d.Store.State().Keys[in.Name])
	if res.Replayed {
		// A retried request: the original response carried the secret;
		// the one generated now was never stored.
		out.Note = shownOnce
		writeJSON(w, http.StatusOK, out)
		return
	}
	out.Secret, out.Note = secret, shownOnce
	writeJSON(w, http.StatusCreated, out)
}

func (a *API) listTokens(w http.ResponseWriter, _ *http.Request, _ principal) {
	out := []tokenJSON{}
	st := a.d.Store.State()
	for _, t := range st.Tokens {
		out = append(out, tokenJSON{Name: t.Name, Role: t.Role.String(), ReadOnly: t.ReadOnly})
	}
	sortBy(out, func(t tokenJSON) string { return t.Name })
	writeJSON(w, http.StatusOK, map[string]any{"data": out})
}

func (a *API) createToken(w http.ResponseWriter, r *http.Request, p principal) {
	var in struct {
		Name string `json:"name"`
		Role string `json:"role"`
	}
	if !decode(w, r, &in) {
		return
	}
	role := cluster.ParseRole(in.Role)
	if in.Name == "" || role == cluster.RoleNone {
		badRequest(w, "name and role (viewer, admin or superadmin) are required")
		return
	}
	secret, err := a.newSecret("rolter-admin-")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "cannot generate a token", "server_error", "internal_error")
		return
	}
	t := cluster.AdminToken{Name: in.Name, SHA256: cluster.HashToken(secret), Role: role}
	res, err := a.d.Store.CreateToken(r.Context(), a.author(r, p), t)
	if !a.written(w, "admin token "+t.Name, err) {
		return
	}
	out := tokenJSON{Name: t.Name, Role: role.String(), Note: shownOnce}
	if res.Replayed {
		writeJSON(w, http.StatusOK, out)
		return
	}
	out.Secret = secret
	writeJSON(w, http.StatusCreated, out)
}

// deleteByName handles DELETE of any resource addressed by name, with
// del, one of Store's Delete methods.
func (a *API) deleteByName(del func(Store, context.Context, cluster.Author, string) (cluster.Written, error)) handler {
	return func(w http.ResponseWriter, r *http.Request, p principal) {
		name := mux.Vars(r)["name"]
		_, err := del(a.d.Store, r.Context(), a.author(r, p), name)
		if a.written(w, "delete "+name, err) {
			w.WriteHeader(http.StatusNoContent)
		}
	}
}

func randRead(p []byte) (int, error) { return rand.Read(p) }
