package router

import (
	"fmt"
	"net/http"
	"testing"
)

// Both fronts route a path with repeated slashes, dot segments or
// percent-escapes as its clean form, and send the clean form upstream; a trailing slash is
// another path.
func TestBothFrontsCleanTheRequestPath(t *testing.T) {
	for _, fr := range fronts {
		for _, tc := range []struct {
			path string
			code int
		}{
			{"//v1/chat/completions", http.StatusOK},
			{"/v1//chat///completions", http.StatusOK},
			{"/v1/./chat/completions", http.StatusOK},
			{"/v1/models/../chat/completions", http.StatusOK},
			{"/v1/chat%2Fcompletions", http.StatusOK},
			{"/v1/chat/completions/", http.StatusNotFound},
			{"/v1/chat/completions/.", http.StatusNotFound},
		} {
			t.Run(fr.name+"/"+tc.path, func(t *testing.T) {
				eng := newEngine(t, okChat)
				f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, nil, nil)
				resp, b := exchange(t, f.dial(t), fmt.Sprintf("POST %s HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
					tc.path, len(chatHi), chatHi))
				if resp.StatusCode != tc.code {
					t.Fatalf("%d %s, want %d", resp.StatusCode, b, tc.code)
				}
				if tc.code != http.StatusOK {
					if errorCode(t, string(b)) != "not_found" {
						t.Fatalf("%s: want not_found", b)
					}
					return
				}
				eng.mu.Lock()
				defer eng.mu.Unlock()
				if len(eng.paths) != 1 || eng.paths[0] != "/v1/chat/completions" {
					t.Fatalf("the engine got %q, want /v1/chat/completions", eng.paths)
				}
			})
		}
	}
}
