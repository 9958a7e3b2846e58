package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The tests in this file are the short subset of the reliability suite:
// they run on every `go test ./...` against a `rolter router --standalone`
// process and `rolter sim` processes (one binary, built once per test
// run), each within a few seconds. The full multi-process suite is
// reliability_test.go (build tag e2e).

// simFleet starts n `rolter sim` processes behind taps.
func simFleet(t *testing.T, n int, speed float64, instant bool) []*Engine {
	t.Helper()
	bin, dir := SharedRolter(t, false), t.TempDir()
	args := []string{"--speed", strconv.FormatFloat(speed, 'g', -1, 64)}
	if instant {
		args = append(args, "--instant")
	}
	var out []*Engine
	for i := range n {
		name := fmt.Sprintf("e%d", i)
		url, p := StartSimArgs(t, bin, "sim-"+name, dir, args...)
		out = append(out, &Engine{Name: name, URL: url, Tap: StartTap(t, url), Proc: p})
	}
	return out
}

// standalone starts a `rolter router --standalone` process serving toml.
func standalone(t *testing.T, toml string) *Standalone {
	t.Helper()
	return StartStandalone(t, SharedRolter(t, false), t.TempDir(), "router", toml)
}

// TestEndpointTableComplete keeps AdminEndpoints in step with the routes
// adminapi registers, so the authorization matrix covers every one.
func TestEndpointTableComplete(t *testing.T) {
	src, err := os.ReadFile("../adminapi/api.go")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^\s*(v|r)\.Handle\("([^"]+)".*\.Methods\(http\.Method(\w+)\)`)
	have := map[string]bool{}
	for _, e := range AdminEndpoints {
		have[e.Method+" "+e.Path] = true
	}
	found := 0
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		path := m[2]
		if m[1] == "v" {
			path = "/api/v1" + path
		}
		method := map[string]string{"Get": "GET", "Put": "PUT", "Post": "POST", "Delete": "DELETE", "Patch": "PATCH"}[m[3]]
		found++
		if !have[method+" "+path] {
			t.Errorf("adminapi serves %s %s, which the authorization matrix does not cover", method, path)
		}
	}
	if found != len(AdminEndpoints) {
		t.Errorf("adminapi registers %d routes, the matrix lists %d", found, len(AdminEndpoints))
	}
}

// TestShortHostileHTTP is scenario 10's data-plane part against a
// router process: slowloris, a 100 MB body, malformed JSON, invalid
// UTF-8, oversized headers and the per-key stream cap.
func TestShortHostileHTTP(t *testing.T) {
	engines := simFleet(t, 2, 1, false)
	lim := HostileLimits{ReadHeader: 500 * time.Millisecond, MaxBodyBytes: 1 << 20, MaxHeaderBytes: 16 << 10}
	const secret = "sk-e2e-short-key"
	sum := sha256.Sum256([]byte(secret))
	keys := fmt.Sprintf("max_streams_per_key = 2\n\n[[keys]]\nname = \"k\"\nsha256 = %q\n", hex.EncodeToString(sum[:]))
	r := standalone(t, FleetTOML(engines, lim.HostileTOML()+keys))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The malformed-request cases must fail on their body, not on the key.
	t.Run("unkeyed", func(t *testing.T) {
		code, err := RawStatus(ctx, r.API, "/v1/chat/completions", []byte(`{"model":"chat"}`), nil)
		if err != nil || code != http.StatusUnauthorized {
			t.Fatalf("no key: %d %v, want 401", code, err)
		}
	})
	CheckHostileHTTP(t, ctx, r.API, secret, lim)
	t.Run("stream cap", func(t *testing.T) { CheckStreamCap(t, ctx, r.API, secret, 2, 4000) })
}

// TestShortRetryBudget is scenario 4, small: both engines answer 503;
// the upstream attempts stay within the retry budget, and traffic returns
// once the engines recover (default breaker and health checks; short
// backoffs only).
func TestShortRetryBudget(t *testing.T) {
	engines := simFleet(t, 2, 1, true)
	r := standalone(t, FleetTOML(engines, "[retry]\nbackoff_base = \"1ms\"\nbackoff_max = \"5ms\"\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 100
	res, err := RetryBudget(ctx, []string{r.API}, engines, n, 3*time.Second)
	bound := BudgetBound(n, 1, len(engines), res.Window)
	t.Logf("%d requests while every engine answered 503 for %v: statuses %v, %d upstream attempts (bound %d); recovered %v after the engines",
		res.Requests, res.Window.Round(time.Millisecond), res.Statuses, res.Attempts, bound, res.Recovery.Round(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts > bound {
		t.Errorf("%d upstream attempts for %d requests: a retry storm", res.Attempts, n)
	}
	if res.Recovery > 10*time.Second {
		t.Errorf("recovery took %v", res.Recovery)
	}
}

// TestShortDisconnectCancels checks that a client leaving a stream makes
// the router cancel its upstream request within 1 s (seen at the tap).
func TestShortDisconnectCancels(t *testing.T) {
	engines := simFleet(t, 1, 1, false)
	r := standalone(t, FleetTOML(engines, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	late, err := DisconnectCancels(ctx, r.API, engines, 4, 4000)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range late {
		if d > time.Second {
			t.Errorf("upstream cancelled %v after the client left", d)
		}
	}
	t.Logf("%d disconnected streams; upstream cancel delays %v", len(late), late)
}

// TestRouterExportsRuntimeMetrics checks that a router built with the
// default registry exports the Go runtime series the soak watches.
func TestRouterExportsRuntimeMetrics(t *testing.T) {
	r := standalone(t, FleetTOML(simFleet(t, 1, 1, true), ""))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code, b, err := Do(ctx, http.MethodGet, r.Admin+"/metrics", "", "")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	for _, name := range []string{"go_memstats_heap_inuse_bytes", "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(string(b), "\n"+name+" ") {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}
