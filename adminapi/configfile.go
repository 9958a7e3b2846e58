package adminapi

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"

	"github.com/rolter/rolter/cluster"
	"github.com/rolter/rolter/config"
)

// The GitOps endpoints: POST /api/v1/config/diff and POST
// /api/v1/config/apply take a rolter.toml as the request body. The
// router parses it as it parses its own file (its environment resolves
// api_key_env and secret_env), then diff answers what syncing it would
// change and apply syncs it with the same FileSync command and generation
// rule a router's own file goes through, signed by the caller's token.

// ConfigReport is the answer of both endpoints.
type ConfigReport struct {
	// From is the revision the cluster runs, To the posted file's.
	From cluster.FileRevision `json:"from"`
	To   cluster.FileRevision `json:"to"`
	// Changes lists what syncing changes (diff) or changed (apply).
	Changes []string `json:"changes"`
	// Outcome: diff answers "would_apply", "unchanged" or "refused";
	// apply answers "applied" or "unchanged" (a refusal is a 409).
	Outcome string `json:"outcome"`
	// Message explains a refusal.
	Message       string `json:"message,omitempty"`
	ConfigVersion uint64 `json:"config_version"`
}

// OutcomeWouldApply is diff's outcome for a file apply would sync.
const OutcomeWouldApply = "would_apply"

// readConfig parses the posted rolter.toml; it writes a 400 and returns
// nil when the body is not a valid file.
func (a *API) readConfig(w http.ResponseWriter, r *http.Request) *config.Config {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxBody)); err != nil {
		badRequest(w, "cannot read body: "+err.Error())
		return nil
	}
	c, err := config.Parse("rolter.toml", buf.Bytes(), a.d.Getenv)
	if err != nil {
		badRequest(w, err.Error())
		return nil
	}
	// The posted file's [limits] are its own; the provider addresses must
	// also pass this router's, as a provider created through the API does.
	for i, p := range c.Providers {
		if err := a.d.Limits.CheckBaseURL(p.APIBase); err != nil {
			badRequest(w, fmt.Sprintf("rolter.toml: providers[%d] (name %q): api_base: %v (this router's [limits])", i, p.Name, err))
			return nil
		}
	}
	return c
}

func (a *API) configDiff(w http.ResponseWriter, r *http.Request, _ principal) {
	c := a.readConfig(w, r)
	if c == nil {
		return
	}
	st := a.d.Store.State()
	plan := cluster.PlanFileSync(st, c)
	out := ConfigReport{From: plan.From, To: plan.To, Changes: nonNil(plan.Changes), ConfigVersion: st.ConfigVersion}
	switch {
	case plan.Err != nil:
		out.Outcome, out.Message = cluster.FileRefused, plan.Err.Error()
	case plan.Sync == nil:
		out.Outcome = cluster.FileUnchanged
	default:
		out.Outcome = OutcomeWouldApply
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) configApply(w http.ResponseWriter, r *http.Request, p principal) {
	c := a.readConfig(w, r)
	if c == nil {
		return
	}
	res, err := a.d.Store.SyncFile(r.Context(), c, cluster.FileSender{Actor: p.name, TokenSHA256: p.tokenHash})
	switch {
	case errors.Is(err, cluster.ErrFileRefused):
		writeError(w, http.StatusConflict, "rolter.toml refused: "+res.Message, "invalid_request_error", "file_refused")
		return
	case errors.Is(err, cluster.ErrNoLeader):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "no raft leader is reachable; retry shortly", "service_unavailable", "no_leader")
		return
	case err != nil:
		a.d.Logger.Error("admin: config apply failed", "err", err)
		writeError(w, http.StatusInternalServerError, "write failed", "server_error", "internal_error")
		return
	}
	writeJSON(w, http.StatusOK, ConfigReport{From: res.From, To: res.To, Changes: nonNil(res.Changes),
		Outcome: res.Outcome, ConfigVersion: res.ConfigVersion})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
