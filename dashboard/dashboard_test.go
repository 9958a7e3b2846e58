package dashboard

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestHandlerServesEmbeddedAssets(t *testing.T) {
	h := Handler()
	cases := []struct {
		method, path string
		status       int
		contentType  string
		body         string
	}{
		{"GET", "/ui/", 200, "text/html", `<script type="module" src="app.js">`},
		{"GET", "/", 200, "text/html", `<div id="app">`}, // behind http.StripPrefix("/ui", …)
		{"GET", "/ui/api.js", 200, "javascript", "/api/v1/adaptive-routing-policy"},
		{"GET", "/api.js", 200, "javascript", "/api/v1/cluster"},
		{"GET", "/ui/app.css", 200, "text/css", ".layout"},
		{"HEAD", "/ui/app.js", 200, "javascript", ""},
		{"GET", "/ui/missing.js", 404, "", ""},
		{"POST", "/ui/", 405, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			res := rec.Result()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.status)
			}
			if !strings.Contains(res.Header.Get("Content-Type"), tc.contentType) {
				t.Errorf("Content-Type %q, want %q", res.Header.Get("Content-Type"), tc.contentType)
			}
			if !strings.Contains(string(body), tc.body) {
				t.Errorf("body lacks %q", tc.body)
			}
			if tc.status == 200 && !strings.Contains(res.Header.Get("Content-Security-Policy"), "script-src 'self'") {
				t.Errorf("no CSP restricting scripts to the embedded ones: %q", res.Header.Get("Content-Security-Policy"))
			}
		})
	}
}

func TestBareUIRedirects(t *testing.T) {
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/ui", nil))
	if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/ui/" {
		t.Fatalf("GET /ui = %d → %q, want 301 → /ui/", rec.Code, rec.Header().Get("Location"))
	}
}

// TestAPIPathsLiveInOneFile keeps the contract reconcilable: no screen
// module names an admin API path; api.js names them all.
func TestAPIPathsLiveInOneFile(t *testing.T) {
	entries, err := assets.ReadDir("assets")
	if err != nil {
		t.Fatal(err)
	}
	apiPath := regexp.MustCompile(`/api/v1/`)
	for _, e := range entries {
		b, err := assets.ReadFile("assets/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() != "api.js" && apiPath.Match(b) {
			t.Errorf("%s names an admin API path; keep them in api.js", e.Name())
		}
		if strings.Contains(string(b), "http://") || strings.Contains(string(b), "https://") {
			if e.Name() != "dom.js" { // dom.js holds the SVG namespace URI
				t.Errorf("%s references an absolute URL; the dashboard must work air-gapped", e.Name())
			}
		}
	}
}
