// Package dashboard owns rolter's web UI: a single page of plain HTML,
// vanilla JavaScript modules and CSS embedded in the binary (go:embed), so
// it needs no build step, no CDN and no network beyond the router it is
// served from. Every router mounts Handler at /ui/ on its admin port; the
// page then talks to the admin API on the same origin like any other
// client, with the operator's admin token as a bearer token.
//
// Every admin API path and JSON shape the page uses lives in
// assets/api.js, so reconciling the UI with the admin API is a one-file
// job. Appending ?refresh_ms=N to the page URL (N ≥ 100) shortens the
// mesh screen's two-second refresh, which demos and the browser tests use.
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed assets
var assets embed.FS

// Prefix is where routers mount Handler on the admin port.
const Prefix = "/ui/"

// contentSecurityPolicy allows only the embedded assets and same-origin
// API calls: no inline script, no third-party origin, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the dashboard. It accepts request paths with or without
// the /ui prefix, so it can be mounted directly at /ui/ or behind
// http.StripPrefix("/ui", …). /ui (no slash) redirects to /ui/.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		// The embed directive above guarantees the directory exists.
		panic("dashboard: embedded assets missing: " + err.Error())
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == "/ui" {
			http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// The assets change with the binary; revalidate rather than run a
		// stale page against a newer admin API after an upgrade.
		h.Set("Cache-Control", "no-cache")

		r2 := r.Clone(r.Context())
		if strings.HasPrefix(r.URL.Path, Prefix) {
			r2.URL.Path = strings.TrimPrefix(r.URL.Path, "/ui")
		}
		r2.URL.RawPath = ""
		files.ServeHTTP(w, r2)
	})
}
