package router

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// failingEngine answers every request with status and a body of size
// bytes: with its length declared when withLength, else chunked (written
// in flushed pieces). A client that stops reading ends the handler.
func failingEngine(t *testing.T, status, size int, withLength bool, header ...string) *fakeEngine {
	piece := bytes.Repeat([]byte("e"), 16<<10)
	return newEngine(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "text/plain")
		if withLength {
			w.Header().Set("Content-Length", fmt.Sprint(size))
		}
		w.WriteHeader(status)
		for left := size; left > 0; {
			n := min(left, len(piece))
			if _, err := w.Write(piece[:n]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			left -= n
		}
	})
}

// An engine that answers an error with a body far over the bound makes
// the router hold none of it: the client gets the engine's status with
// the router's error in the OpenAI shape, on either front.
func TestAnEngineErrorBodyOverTheBoundIsReplaced(t *testing.T) {
	const huge = 64 << 20
	for _, tc := range []struct {
		name       string
		status     int
		withLength bool
		header     []string
		typ        string
	}{
		{"500, chunked", http.StatusInternalServerError, false, nil, "server_error"},
		{"503 of a declared length", http.StatusServiceUnavailable, true, nil, "server_error"},
		{"429 with Retry-After, chunked", http.StatusTooManyRequests, false, []string{"Retry-After", "7"}, "rate_limit_error"},
	} {
		for _, fr := range fronts {
			t.Run(fr.name+"/"+tc.name, func(t *testing.T) {
				eng := failingEngine(t, tc.status, huge, tc.withLength, tc.header...)
				f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, nil, nil)
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				code, h, body := f.post(t.Context(), chatHi)
				runtime.ReadMemStats(&after)
				if code != tc.status || len(body) > 4096 || h.Get("Content-Type") != "application/json" ||
					errorCode(t, body) != "upstream_error_too_large" {
					t.Fatalf("%d %q, %d bytes %.200s: want %d and the router's upstream_error_too_large", code,
						h.Get("Content-Type"), len(body), body, tc.status)
				}
				if !strings.Contains(body, `"type":"`+tc.typ+`"`) || !strings.Contains(body, "provider a answered HTTP") {
					t.Fatalf("error %s: want type %s naming the provider", body, tc.typ)
				}
				if h.Get("X-Request-Id") == "" || h.Get("X-Rolter-Target") == "" {
					t.Fatalf("headers %v: want the request id and the target", h)
				}
				if len(tc.header) > 0 && h.Get(tc.header[0]) != tc.header[1] {
					t.Fatalf("%s %q, want the engine's %q", tc.header[0], h.Get(tc.header[0]), tc.header[1])
				}
				if grew := after.TotalAlloc - before.TotalAlloc; grew > huge/16 {
					t.Fatalf("the request allocated %d bytes for an engine body of %d", grew, huge)
				}
			})
		}
	}
}

// An error body up to the bound is relayed as the engine sent it; one
// byte more, or one that breaks before its end, is replaced.
func TestAnEngineErrorBodyUpToTheBoundIsRelayed(t *testing.T) {
	for _, fr := range fronts {
		t.Run(fr.name+"/at the bound", func(t *testing.T) {
			eng := failingEngine(t, http.StatusBadGateway, maxFailureBody, false)
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, nil, nil)
			code, h, body := f.post(t.Context(), chatHi)
			if code != http.StatusBadGateway || body != strings.Repeat("e", maxFailureBody) || h.Get("Content-Type") != "text/plain" {
				t.Fatalf("%d %q, %d bytes: want the engine's 502 and its %d-byte body", code, h.Get("Content-Type"), len(body), maxFailureBody)
			}
		})
		t.Run(fr.name+"/one byte over", func(t *testing.T) {
			eng := failingEngine(t, http.StatusBadGateway, maxFailureBody+1, false)
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, nil, nil)
			code, _, body := f.post(t.Context(), chatHi)
			if code != http.StatusBadGateway || errorCode(t, body) != "upstream_error_too_large" {
				t.Fatalf("%d %.200s", code, body)
			}
		})
		t.Run(fr.name+"/broken", func(t *testing.T) {
			eng := newEngine(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
				w.Header().Set("Content-Length", "1000")
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, `{"error":`)
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			})
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, nil, nil)
			code, _, body := f.post(t.Context(), chatHi)
			if code != http.StatusInternalServerError || errorCode(t, body) != "upstream_error_unreadable" {
				t.Fatalf("%d %.200s", code, body)
			}
		})
	}
}
