package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// Endpoint is one admin or internal route of adminapi, with the least
// role it needs ("internal": the node-to-node token).
type Endpoint struct {
	Method, Path string
	Role         string // viewer, admin, superadmin or internal
}

// AdminEndpoints is every route adminapi.API serves, in an order where a
// principal allowed to write creates a resource before reading, updating
// and deleting it. TestEndpointTableComplete checks it against the
// routes registered in adminapi/api.go.
var AdminEndpoints = []Endpoint{
	{"GET", "/api/v1/adaptive-routing-policy", "superadmin"},
	{"PUT", "/api/v1/adaptive-routing-policy", "superadmin"},
	{"GET", "/api/v1/adaptive-routing-telemetry", "superadmin"},
	{"GET", "/api/v1/admission", "superadmin"},
	{"PUT", "/api/v1/admission", "superadmin"},
	{"GET", "/api/v1/audit", "admin"},
	{"GET", "/api/v1/cluster", "viewer"},
	{"POST", "/api/v1/config/diff", "admin"},
	{"POST", "/api/v1/config/apply", "admin"},
	{"GET", "/api/v1/route-stats", "viewer"},
	{"GET", "/api/v1/whoami", "viewer"},
	{"GET", "/api/v1/providers", "viewer"},
	{"POST", "/api/v1/providers", "admin"},
	{"GET", "/api/v1/providers/{name}", "viewer"},
	{"PUT", "/api/v1/providers/{name}", "admin"},
	{"GET", "/api/v1/routes", "viewer"},
	{"POST", "/api/v1/routes", "admin"},
	{"GET", "/api/v1/routes/{name:.+}", "viewer"},
	{"PUT", "/api/v1/routes/{name:.+}", "admin"},
	{"DELETE", "/api/v1/routes/{name:.+}", "admin"},
	{"GET", "/api/v1/provider-groups", "viewer"},
	{"POST", "/api/v1/provider-groups", "admin"},
	{"GET", "/api/v1/provider-groups/{name}", "viewer"},
	{"PUT", "/api/v1/provider-groups/{name}", "admin"},
	{"DELETE", "/api/v1/provider-groups/{name}", "admin"},
	{"DELETE", "/api/v1/providers/{name}", "admin"},
	{"GET", "/api/v1/keys", "viewer"},
	{"POST", "/api/v1/keys", "admin"},
	{"PUT", "/api/v1/keys/{name}/priority", "admin"},
	{"DELETE", "/api/v1/keys/{name}", "admin"},
	{"PUT", "/api/v1/model-prices/{name:.+}", "admin"},
	{"GET", "/api/v1/model-prices", "viewer"},
	{"GET", "/api/v1/model-prices/{name:.+}", "viewer"},
	{"DELETE", "/api/v1/model-prices/{name:.+}", "admin"},
	{"GET", "/api/v1/admin-tokens", "superadmin"},
	{"POST", "/api/v1/admin-tokens", "superadmin"},
	{"DELETE", "/api/v1/admin-tokens/{name}", "superadmin"},
	{"POST", "/internal/adaptive-telemetry", "internal"},
}

var roleRank = map[string]int{"viewer": 1, "admin": 2, "superadmin": 3}

// Principal is one caller of the matrix.
type Principal struct {
	Name  string // none, wrong, viewer, admin, superadmin, internal
	Token string
}

// Expected is the status class the matrix wants for p on e: 401, 403 or
// 200 (any 2xx).
func Expected(p Principal, e Endpoint) int {
	if e.Role == "internal" {
		if p.Name == "internal" {
			return http.StatusOK
		}
		return http.StatusUnauthorized
	}
	have, ok := roleRank[p.Name]
	switch {
	case !ok:
		return http.StatusUnauthorized
	case have < roleRank[e.Role]:
		return http.StatusForbidden
	default:
		return http.StatusOK
	}
}

// request builds the concrete request p makes on e: every allowed write
// targets p's own resources (p-<who>, r-<who>, ...) so the calls of one
// principal form a create/read/update/delete sequence.
func request(p Principal, e Endpoint, provider string) (path, body string, hdr []string) {
	who := p.Name
	path = e.Path
	name := map[string]string{
		"/api/v1/providers/{name}": "p-" + who, "/api/v1/routes/{name:.+}": "r-" + who,
		"/api/v1/provider-groups/{name}": "g-" + who, "/api/v1/keys/{name}": "k-" + who,
		"/api/v1/keys/{name}/priority": "k-" + who,
		"/api/v1/admin-tokens/{name}":  "t-" + who, "/api/v1/model-prices/{name:.+}": "org/m-" + who,
	}[e.Path]
	if e.Method == http.MethodGet {
		// Reads address resources every principal can see: the fleet's
		// own provider, route and group.
		name = map[string]string{"/api/v1/providers/{name}": provider, "/api/v1/routes/{name:.+}": "chat",
			"/api/v1/provider-groups/{name}": "fleet", "/api/v1/model-prices/{name:.+}": "m"}[e.Path]
	}
	if name != "" {
		path = strings.Replace(strings.Replace(path, "{name:.+}", name, 1), "{name}", name, 1)
	}
	target := fmt.Sprintf(`[{"provider":%q,"model":"m"}]`, provider)
	switch e.Method + " " + e.Path {
	case "PUT /api/v1/adaptive-routing-policy":
		body = `{"enabled":false,"latency_weight":1,"cost_weight":0.5,"load_weight":0.25,"exploration_ratio":0.05,"min_samples":50}`
	case "POST /api/v1/providers":
		body = fmt.Sprintf(`{"name":"p-%s","api_base":"http://127.0.0.1:9/v1"}`, who)
	case "PUT /api/v1/providers/{name}":
		body = `{"api_base":"http://127.0.0.1:10/v1"}`
	case "POST /api/v1/routes":
		body = fmt.Sprintf(`{"model":"r-%s","strategy":"round_robin","targets":%s}`, who, target)
	case "PUT /api/v1/routes/{name:.+}":
		body = fmt.Sprintf(`{"strategy":"power_of_two","targets":%s}`, target)
	case "POST /api/v1/provider-groups":
		body = fmt.Sprintf(`{"name":"g-%s","slug":"g%s","strategy":"round_robin","members":%s}`, who, who, target)
	case "PUT /api/v1/provider-groups/{name}":
		body = fmt.Sprintf(`{"slug":"g%s","strategy":"power_of_two","members":%s}`, who, target)
	case "POST /api/v1/keys":
		body = fmt.Sprintf(`{"name":"k-%s","models":["chat"]}`, who)
	case "PUT /api/v1/keys/{name}/priority":
		body = `{"max_priority":"sheddable"}`
	case "PUT /api/v1/admission":
		body = `{"enabled":false}`
	case "PUT /api/v1/model-prices/{name:.+}":
		body = `{"price_in_per_mtok":1,"price_out_per_mtok":2}`
	case "POST /api/v1/admin-tokens":
		body = fmt.Sprintf(`{"name":"t-%s","role":"viewer"}`, who)
	case "POST /api/v1/config/diff", "POST /api/v1/config/apply":
		// An empty rolter.toml: generation 0 with other content than the
		// fleet's file, so apply is refused by the generation rule (409)
		// and never deletes the fleet's entries.
		body = "# empty\n"
	case "POST /internal/adaptive-telemetry":
		body = `{"routes":[]}`
		hdr = []string{"x-rolter-node-id", "e2e-matrix"}
	}
	return path, body, hdr
}

// MatrixCell is one (principal, endpoint) result.
type MatrixCell struct {
	Principal string
	Endpoint  Endpoint
	Want, Got int
	Body      string
}

// Ok reports whether the cell matched.
func (c MatrixCell) Ok() bool {
	if c.Want == http.StatusOK && c.Endpoint.Path == "/api/v1/config/apply" {
		// Past authorization the generation rule refuses the matrix's
		// file: 409 file_refused, which only an authorized caller sees.
		return c.Got/100 == 2 || (c.Got == http.StatusConflict && strings.Contains(c.Body, "file_refused"))
	}
	if c.Want == http.StatusOK {
		return c.Got/100 == 2
	}
	return c.Got == c.Want
}

// AuthMatrix calls every endpoint on admin (a router's admin base URL) as
// every principal and returns the cells and the secrets it was handed
// (the API keys the allowed principals created), for the log scan.
// provider names an existing provider (route and group bodies, reads); the
// route "chat" and the provider group "fleet" must exist too.
func AuthMatrix(ctx context.Context, admin, provider string, principals []Principal) ([]MatrixCell, []string, error) {
	var cells []MatrixCell
	var secrets []string
	for _, p := range principals {
		for _, e := range AdminEndpoints {
			path, body, hdr := request(p, e, provider)
			code, b, err := Do(ctx, e.Method, admin+path, p.Token, body, hdr...)
			if err != nil {
				return cells, secrets, fmt.Errorf("%s %s as %s: %w", e.Method, path, p.Name, err)
			}
			var created struct {
				Secret string `json:"secret"`
			}
			if json.Unmarshal(b, &created) == nil && created.Secret != "" {
				secrets = append(secrets, created.Secret)
			}
			cells = append(cells, MatrixCell{Principal: p.Name, Endpoint: e, Want: Expected(p, e), Got: code, Body: string(b)})
		}
	}
	return cells, secrets, nil
}

// CreateToken makes an admin token of role through the superadmin token
// and returns its secret.
func CreateToken(ctx context.Context, admin, superadmin, name, role string) (string, error) {
	code, b, err := Do(ctx, http.MethodPost, admin+"/api/v1/admin-tokens", superadmin, fmt.Sprintf(`{"name":%q,"role":%q}`, name, role))
	if err != nil || code != http.StatusCreated {
		return "", fmt.Errorf("create %s token: %d %s %v", role, code, b, err)
	}
	return jsonString(b, "secret")
}

// SecretLeak is a secret found in a log.
type SecretLeak struct {
	File, Secret string
	Line         int
}

// ScanLogs looks for every secret (its full text and its first 16 bytes)
// in every *.log file under dir and returns the hits.
func ScanLogs(dir string, secrets []string) ([]SecretLeak, int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return nil, 0, err
	}
	var leaks []SecretLeak
	lines := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, 0, err
		}
		for i, line := range strings.Split(string(b), "\n") {
			lines++
			for _, s := range secrets {
				if s == "" {
					continue
				}
				probe := s
				if len(probe) > 16 {
					probe = probe[:16]
				}
				if strings.Contains(line, probe) {
					leaks = append(leaks, SecretLeak{File: filepath.Base(f), Secret: s[:min(6, len(s))] + "…", Line: i + 1})
				}
			}
		}
	}
	return leaks, lines, nil
}

// SSRFCase is one provider api_base the admin API must refuse or accept.
type SSRFCase struct {
	Base string
	Want int
}

// SSRFCases are scenario 10's provider URLs for a cluster whose [limits]
// allow http/https on 127.0.0.1 only.
var SSRFCases = []SSRFCase{
	{"file:///etc/passwd", http.StatusBadRequest},
	{"gopher://127.0.0.1:70/_GET", http.StatusBadRequest},
	{"ftp://127.0.0.1/x", http.StatusBadRequest},
	{"http://169.254.169.254/latest/meta-data", http.StatusBadRequest},
	{"http://metadata.google.internal/", http.StatusBadRequest},
	{"http://localhost:9/v1", http.StatusBadRequest},
	{"http://user:pw@127.0.0.1:9/v1", http.StatusBadRequest},
	{"http://[::1]:9/v1", http.StatusBadRequest},
	{"//127.0.0.1:9/v1", http.StatusBadRequest},
	{"http://127.0.0.1:9/v1", http.StatusCreated},
}
