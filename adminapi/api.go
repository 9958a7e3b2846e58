// Package adminapi owns rolter's admin HTTP API (gorilla/mux, served on
// every router's admin port): CRUD for providers, routes, provider groups,
// API keys and admin tokens, the adaptive routing policy and telemetry
// endpoints of compat.md, the audit log and the cluster view, the GitOps
// rolter.toml diff/apply endpoints and their client (Client), plus
// authentication (bearer admin tokens, SHA-256 hashed in the Raft state)
// and role checks. Writes go through the Store's domain methods
// (CreateProvider, SetPolicy, ...); the store forwards them to the Raft
// leader and the FSM checks the role again when it applies them, so a
// handler bug cannot escalate. A refusal comes back as a cluster.Code
// (not_found, conflict, readonly, ...), which is the error code clients
// see.
//
// Adaptive telemetry is soft state: each router keeps a Telemetry table
// in memory. Every router's Pusher posts its sample to every router's
// POST /internal/adaptive-telemetry (itself included), so GET
// /api/v1/adaptive-routing-telemetry on any router answers from local
// memory with every node's rows; a router that restarts refills within
// one push interval (15 s). The same report carries the router's route
// stats ring (package routestats; GET /api/v1/route-stats folds every
// router's) and its build, admin address and applied config version (GET
// /api/v1/cluster).
package adminapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/cluster"
	gossip "github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/config"
)

// Store is the replicated state the API reads and writes (a
// *cluster.Store). Every write commits through the leader, forwarding
// when needed, and returns once this router applied it; it fails with
// cluster.ErrNoLeader when no leader answers in time and with a
// *cluster.RefusedError (errors.Is a cluster.Code) when the state
// machine refuses it.
type Store interface {
	// State returns the current immutable state.
	State() *cluster.State

	CreateProvider(ctx context.Context, by cluster.Author, p config.Provider) (cluster.Written, error)
	UpdateProvider(ctx context.Context, by cluster.Author, p config.Provider) (cluster.Written, error)
	DeleteProvider(ctx context.Context, by cluster.Author, name string) (cluster.Written, error)
	CreateRoute(ctx context.Context, by cluster.Author, r config.Route) (cluster.Written, error)
	UpdateRoute(ctx context.Context, by cluster.Author, r config.Route) (cluster.Written, error)
	DeleteRoute(ctx context.Context, by cluster.Author, model string) (cluster.Written, error)
	CreateGroup(ctx context.Context, by cluster.Author, g config.ProviderGroup) (cluster.Written, error)
	UpdateGroup(ctx context.Context, by cluster.Author, g config.ProviderGroup) (cluster.Written, error)
	DeleteGroup(ctx context.Context, by cluster.Author, name string) (cluster.Written, error)
	CreateKey(ctx context.Context, by cluster.Author, k cluster.APIKey) (cluster.Written, error)
	DeleteKey(ctx context.Context, by cluster.Author, name string) (cluster.Written, error)
	CreateToken(ctx context.Context, by cluster.Author, t cluster.AdminToken) (cluster.Written, error)
	DeleteToken(ctx context.Context, by cluster.Author, name string) (cluster.Written, error)
	SetPolicy(ctx context.Context, by cluster.Author, p adaptive.Policy) (cluster.Written, error)
	SetModelPrice(ctx context.Context, by cluster.Author, m config.ModelPrice) (cluster.Written, error)
	DeleteModelPrice(ctx context.Context, by cluster.Author, model string) (cluster.Written, error)
	SetAdmission(ctx context.Context, by cluster.Author, ad config.Admission) (cluster.Written, error)
	SetKeyPriority(ctx context.Context, by cluster.Author, name, maxPriority string, fairnessHeader bool) (cluster.Written, error)
	// SyncFile sends the difference between c and the file-owned
	// entries as one file sync (POST /api/v1/config/apply).
	SyncFile(ctx context.Context, c *config.Config, from cluster.FileSender) (cluster.FileSyncResult, error)
}

var _ Store = (*cluster.Store)(nil)

// ClusterInfo is the local Raft view.
type ClusterInfo interface {
	Info() cluster.Info
}

// RouterInfo is one router as the gossip inventory knows it: what it
// announced in the pool (AdminAddr as a reachable host:port, a
// ConfigVersion of 0 when not known), and whether it is a member now.
type RouterInfo struct {
	gossip.RouterInfo
	Alive bool
}

// Inventory lists the routers gossip knows (optional).
type Inventory interface {
	Routers() []RouterInfo
}

// EngineInventory lists the engines gossip knows (optional).
type EngineInventory interface {
	Engines() []gossip.EngineSnapshot
}

// Deps is what New needs.
type Deps struct {
	Store   Store
	Cluster ClusterInfo
	// Inventory merges gossip's router list into GET /api/v1/cluster
	// (nil: Raft's view only).
	Inventory Inventory
	// Engines adds the gossip view's engines to GET /api/v1/cluster (nil:
	// an empty list).
	Engines EngineInventory
	// Parked lists this router's parked targets in GET /api/v1/cluster
	// (nil: none).
	Parked ParkedSource
	// Telemetry is this router's adaptive telemetry table (nil: New
	// creates one; pass the same table to a Pusher's Local).
	Telemetry *Telemetry
	// InternalToken authenticates POST /internal/adaptive-telemetry.
	InternalToken string
	// Limits validates provider api_base (no SSRF).
	Limits config.Limits
	// Getenv resolves api_key_env and secret_env in a rolter.toml posted
	// to /api/v1/config/* (default os.Getenv: the router's environment).
	Getenv func(string) string
	Logger *slog.Logger
	// Now and Random are injectable for tests (defaults: time.Now and
	// crypto/rand).
	Now    func() time.Time
	Random io.Reader
}

// ParkedSource is the router's view of its parked targets.
type ParkedSource interface {
	// ParkedTargets lists the targets parked now; called per admin
	// request, off the request path.
	ParkedTargets() []ParkedTarget
}

// ParkedTarget is one parked target as GET /api/v1/cluster shows it:
// which provider/model pair, until when and why.
type ParkedTarget struct {
	Target string    `json:"target"`
	Model  string    `json:"model,omitempty"`
	Until  time.Time `json:"until"`
	Reason string    `json:"reason"`
}

// API is the admin HTTP handler.
type API struct {
	d      Deps
	router *mux.Router
}

// New returns the admin API handler.
func New(d Deps) *API {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Random == nil {
		d.Random = cryptoRand{}
	}
	if d.Getenv == nil {
		d.Getenv = os.Getenv
	}
	if d.Telemetry == nil {
		d.Telemetry = NewTelemetry(d.Now)
	}
	if len(d.Limits.AllowedSchemes) == 0 {
		d.Limits = config.Default().Limits
	}
	a := &API{d: d, router: mux.NewRouter()}
	a.routes()
	return a
}

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.router.ServeHTTP(w, r) }

// Telemetry returns the API's telemetry table.
func (a *API) Telemetry() *Telemetry { return a.d.Telemetry }

func (a *API) routes() {
	r := a.router
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "not found", "invalid_request_error", "not_found")
	})
	v := r.PathPrefix("/api/v1").Subrouter()
	v.Handle("/adaptive-routing-policy", a.auth(cluster.RoleSuperadmin, a.getPolicy)).Methods(http.MethodGet)
	v.Handle("/adaptive-routing-policy", a.auth(cluster.RoleSuperadmin, a.putPolicy)).Methods(http.MethodPut)
	v.Handle("/adaptive-routing-telemetry", a.auth(cluster.RoleSuperadmin, a.getTelemetry)).Methods(http.MethodGet)
	v.Handle("/audit", a.auth(cluster.RoleAdmin, a.getAudit)).Methods(http.MethodGet)
	v.Handle("/cluster", a.auth(cluster.RoleViewer, a.getCluster)).Methods(http.MethodGet)
	v.Handle("/config/diff", a.auth(cluster.RoleAdmin, a.configDiff)).Methods(http.MethodPost)
	v.Handle("/config/apply", a.auth(cluster.RoleAdmin, a.configApply)).Methods(http.MethodPost)
	v.Handle("/route-stats", a.auth(cluster.RoleViewer, a.getRouteStats)).Methods(http.MethodGet)
	v.Handle("/whoami", a.auth(cluster.RoleViewer, a.whoami)).Methods(http.MethodGet)

	v.Handle("/providers", a.auth(cluster.RoleViewer, listOf(a, (*cluster.State).ProviderList, providerOut))).Methods(http.MethodGet)
	v.Handle("/providers", a.auth(cluster.RoleAdmin, a.createProvider)).Methods(http.MethodPost)
	v.Handle("/providers/{name}", a.auth(cluster.RoleViewer, oneOf(a, "provider", func(s *cluster.State) map[string]config.Provider { return s.Providers }, providerOut))).Methods(http.MethodGet)
	v.Handle("/providers/{name}", a.auth(cluster.RoleAdmin, a.updateProvider)).Methods(http.MethodPut)
	v.Handle("/providers/{name}", a.auth(cluster.RoleAdmin, a.deleteByName(Store.DeleteProvider))).Methods(http.MethodDelete)

	v.Handle("/routes", a.auth(cluster.RoleViewer, listOf(a, (*cluster.State).RouteList, routeOut))).Methods(http.MethodGet)
	v.Handle("/routes", a.auth(cluster.RoleAdmin, a.createRoute)).Methods(http.MethodPost)
	v.Handle("/routes/{name:.+}", a.auth(cluster.RoleViewer, oneOf(a, "route", func(s *cluster.State) map[string]config.Route { return s.Routes }, routeOut))).Methods(http.MethodGet)
	v.Handle("/routes/{name:.+}", a.auth(cluster.RoleAdmin, a.updateRoute)).Methods(http.MethodPut)
	v.Handle("/routes/{name:.+}", a.auth(cluster.RoleAdmin, a.deleteByName(Store.DeleteRoute))).Methods(http.MethodDelete)

	v.Handle("/provider-groups", a.auth(cluster.RoleViewer, listOf(a, (*cluster.State).GroupList, groupOut))).Methods(http.MethodGet)
	v.Handle("/provider-groups", a.auth(cluster.RoleAdmin, a.createGroup)).Methods(http.MethodPost)
	v.Handle("/provider-groups/{name}", a.auth(cluster.RoleViewer, oneOf(a, "provider group", func(s *cluster.State) map[string]config.ProviderGroup { return s.Groups }, groupOut))).Methods(http.MethodGet)
	v.Handle("/provider-groups/{name}", a.auth(cluster.RoleAdmin, a.updateGroup)).Methods(http.MethodPut)
	v.Handle("/provider-groups/{name}", a.auth(cluster.RoleAdmin, a.deleteByName(Store.DeleteGroup))).Methods(http.MethodDelete)

	v.Handle("/model-prices", a.auth(cluster.RoleViewer, listOf(a, (*cluster.State).ModelList, modelPriceOut))).Methods(http.MethodGet)
	v.Handle("/model-prices/{name:.+}", a.auth(cluster.RoleViewer, oneOf(a, "model in the price catalog", func(s *cluster.State) map[string]config.ModelPrice { return s.Models }, modelPriceOut))).Methods(http.MethodGet)
	v.Handle("/model-prices/{name:.+}", a.auth(cluster.RoleAdmin, a.putModelPrice)).Methods(http.MethodPut)
	v.Handle("/model-prices/{name:.+}", a.auth(cluster.RoleAdmin, a.deleteByName(Store.DeleteModelPrice))).Methods(http.MethodDelete)

	v.Handle("/keys", a.auth(cluster.RoleViewer, listOf(a, (*cluster.State).KeyList, keyOut))).Methods(http.MethodGet)
	v.Handle("/keys", a.auth(cluster.RoleAdmin, a.createKey)).Methods(http.MethodPost)
	v.Handle("/keys/{name}", a.auth(cluster.RoleAdmin, a.deleteByName(Store.DeleteKey))).Methods(http.MethodDelete)
	v.Handle("/keys/{name}/priority", a.auth(cluster.RoleAdmin, a.putKeyPriority)).Methods(http.MethodPut)
	v.Handle("/admission", a.auth(cluster.RoleSuperadmin, a.getAdmission)).Methods(http.MethodGet)
	v.Handle("/admission", a.auth(cluster.RoleSuperadmin, a.putAdmission)).Methods(http.MethodPut)

	v.Handle("/admin-tokens", a.auth(cluster.RoleSuperadmin, a.listTokens)).Methods(http.MethodGet)
	v.Handle("/admin-tokens", a.auth(cluster.RoleSuperadmin, a.createToken)).Methods(http.MethodPost)
	v.Handle("/admin-tokens/{name}", a.auth(cluster.RoleSuperadmin, a.deleteByName(Store.DeleteToken))).Methods(http.MethodDelete)

	r.Handle("/internal/adaptive-telemetry", http.HandlerFunc(a.postTelemetry)).Methods(http.MethodPost)
}

// ErrNotReplicated: this router has not applied the seeded state yet (a
// follower right after the cluster formed), so it cannot check any token.
var ErrNotReplicated = errors.New("not ready: state not yet replicated")

// principal is the authenticated caller.
type principal struct {
	name      string
	tokenHash string
	role      cluster.Role
}

type handler func(w http.ResponseWriter, r *http.Request, p principal)

// auth authenticates the bearer admin token and requires role.
func (a *API) auth(role cluster.Role, h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := bearer(r)
		if !ok {
			writeError(w, http.StatusUnauthorized, "missing bearer admin token", "authentication_error", "missing_token")
			return
		}
		st := a.d.Store.State()
		if !st.Seeded {
			// A follower that has not applied the seeded state yet knows
			// no token at all: saying "invalid" would send the operator
			// hunting for a wrong token.
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, ErrNotReplicated.Error(), "server_error", "not_ready")
			return
		}
		sum := cluster.HashToken(tok)
		have, name := st.TokenRole(sum)
		if have == cluster.RoleNone {
			writeError(w, http.StatusUnauthorized, "invalid admin token", "authentication_error", "invalid_token")
			return
		}
		if have < role {
			writeError(w, http.StatusForbidden, "this endpoint requires the "+role.String()+" role", "permission_error", "insufficient_role")
			return
		}
		h(w, r, principal{name: name, tokenHash: sum, role: have})
	})
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		tok, ok = strings.CutPrefix(h, "bearer ")
	}
	tok = strings.TrimSpace(tok)
	return tok, ok && tok != ""
}

func tokenEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// apiError is the OpenAI error shape.
type apiError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, msg, typ, code string) {
	var e apiError
	e.Error.Message, e.Error.Type, e.Error.Code = msg, typ, code
	writeJSON(w, status, e)
}

func badRequest(w http.ResponseWriter, msg string) {
	writeError(w, http.StatusBadRequest, msg, "invalid_request_error", "invalid_value")
}

// listOf is the handler of a kind's list (GET /api/v1/providers, …):
// {"data": [...]}, every entry list returns as out shows it.
func listOf[T, J any](a *API, list func(*cluster.State) []T, out func(T) J) handler {
	return func(w http.ResponseWriter, _ *http.Request, _ principal) {
		data := []J{}
		for _, e := range list(a.d.Store.State()) {
			data = append(data, out(e))
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": data})
	}
}

// oneOf is the handler of one entry of a kind (GET /api/v1/providers/{name},
// …): the entry named in the URL as out shows it, or 404 "no such <what>".
func oneOf[T, J any](a *API, what string, entries func(*cluster.State) map[string]T, out func(T) J) handler {
	return func(w http.ResponseWriter, r *http.Request, _ principal) {
		e, ok := entries(a.d.Store.State())[mux.Vars(r)["name"]]
		if !ok {
			writeError(w, http.StatusNotFound, "no such "+what, "invalid_request_error", "not_found")
			return
		}
		writeJSON(w, http.StatusOK, out(e))
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

const maxBody = 1 << 20

// decode reads a JSON body into v, refusing unknown fields.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		badRequest(w, "invalid JSON body: "+err.Error())
		return false
	}
	return true
}

// author is who makes a write: the principal, the request's
// Idempotency-Key and the API's clock.
func (a *API) author(r *http.Request, p principal) cluster.Author {
	return cluster.Author{Name: p.name, TokenSHA256: p.tokenHash, IdempotencyKey: r.Header.Get("Idempotency-Key"), Time: a.d.Now()}
}

// written maps the outcome of a write (what names it, for the log) to
// HTTP. It reports whether the write was accepted; a response has been
// written otherwise.
func (a *API) written(w http.ResponseWriter, what string, err error) bool {
	var refused *cluster.RefusedError
	switch {
	case err == nil:
		return true
	case errors.Is(err, cluster.ErrNoLeader):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "no raft leader is reachable; retry shortly", "service_unavailable", "no_leader")
	case errors.As(err, &refused):
		status, typ := http.StatusBadRequest, "invalid_request_error"
		switch refused.Code {
		case cluster.ErrForbidden:
			status, typ = http.StatusForbidden, "permission_error"
		case cluster.ErrUnknownToken:
			status, typ = http.StatusUnauthorized, "authentication_error"
		case cluster.ErrNotFound:
			status = http.StatusNotFound
		case cluster.ErrConflict, cluster.ErrReadOnly:
			status = http.StatusConflict
		}
		writeError(w, status, refused.Message, typ, string(refused.Code))
	default:
		a.d.Logger.Error("admin: write failed", "write", what, "err", err)
		writeError(w, http.StatusInternalServerError, "write failed", "server_error", "internal_error")
	}
	return false
}

type cryptoRand struct{}

func (cryptoRand) Read(p []byte) (int, error) { return randRead(p) }
