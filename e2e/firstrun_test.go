//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

// Issue 14's first-run traps, with real processes: a router and a sidecar
// started by hand on one host with no --node-id (case 1) and no TLS flags
// (case 2), and the first second of a three-router cluster (case 5).

const firstRunToken = "first-run-admin-token"

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// engineState returns the state GET /api/v1/cluster reports for the
// engine at url, and the node ids of every engine.
func engineState(admin, url string) (string, []string, error) {
	code, body, err := Do(context.Background(), http.MethodGet, admin+"/api/v1/cluster", firstRunToken, "")
	if err != nil || code != http.StatusOK {
		return "", nil, fmt.Errorf("GET /api/v1/cluster: %d %s %v", code, body, err)
	}
	var v struct {
		Engines []struct {
			NodeID    string `json:"node_id"`
			EngineURL string `json:"engine_url"`
			State     string `json:"state"`
		} `json:"engines"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", nil, err
	}
	var ids []string
	state := ""
	for _, e := range v.Engines {
		ids = append(ids, e.NodeID)
		if strings.TrimSuffix(e.EngineURL, "/") == strings.TrimSuffix(url, "/") {
			state = e.State
		}
	}
	return state, ids, nil
}

func TestFirstRunRouterAndSidecarOnOneHost(t *testing.T) {
	bin := BuildRolterCgo(t)
	dir := t.TempDir()
	kvAddrs := FreeAddrs(t, 2)
	kv, replay := "tcp://"+kvAddrs[0], "tcp://"+kvAddrs[1]
	engine, _ := StartSimArgs(t, bin, "sim", dir, "--instant", "--kv-events", kv, "--kv-events-dial", "bind",
		"--kv-events-replay", replay)
	writeFiles(t, dir, map[string]string{"rolter.toml": fmt.Sprintf(`
[[providers]]
name = "engine"
api_base = %q

[[routes]]
model = "m"
strategy = "precise_cache_aware"
targets = [{ provider = "engine", model = "meta-llama/Llama-3.1-8B-Instruct" }]
`, engine)})
	a := FreeAddrs(t, 4)
	api, admin, gossip := "http://"+a[0], "http://"+a[1], a[3]
	// As a newcomer starts them: no --node-id, no TLS, no --insecure-dev,
	// no gossip key; every address on loopback.
	bin.Env = append(bin.Env, "ROLTER_ADMIN_TOKEN="+firstRunToken, "ROLTER_NODE_ID=", "ROLTER_GOSSIP_KEY=")
	router := Start(t, bin, "router", dir, "router", "--config", filepath.Join(dir, "rolter.toml"),
		"--http", a[0], "--admin", a[1], "--raft", a[2], "--gossip", gossip, "--data-dir", filepath.Join(dir, "data"))
	if err := testwait.Poll(30*time.Second, 50*time.Millisecond, func() error {
		if router.Exited() {
			return errors.New("router exited")
		}
		code, _, err := Do(context.Background(), http.MethodGet, admin+"/readyz", "", "")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("readyz %d", code)
		}
		return err
	}); err != nil {
		t.Fatalf("a lone loopback router did not start: %v\n%s", err, router.Tail(3000))
	}
	if !strings.Contains(router.Tail(5000), "plaintext Raft and gossip") {
		t.Errorf("the router did not warn that it runs plaintext:\n%s", router.Tail(3000))
	}
	s := FreeAddrs(t, 2)
	// The engine serves a request before its sidecar runs: the replay
	// endpoint lets the sidecar catch up on what it missed.
	body := func(i int) string {
		return fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"request %d: a prompt long enough to fill a few KV blocks of sixteen tokens each, twice over, and then some more words"}],"max_tokens":4}`, i)
	}
	if code, b, err := Do(context.Background(), http.MethodPost, api+"/v1/chat/completions", "", body(0)); err != nil || code != http.StatusOK {
		t.Fatalf("chat before the sidecar: %d %s %v", code, b, err)
	}
	sidecar := Start(t, bin, "sidecar", dir, "sidecar", "--engine", engine, "--kv-events", kv, "--kv-events-replay", replay,
		"--gossip", s[0], "--join", gossip, "--metrics-addr", s[1])
	var ids []string
	i := 0
	err := testwait.Poll(30*time.Second, 200*time.Millisecond, func() error {
		if sidecar.Exited() {
			return errors.New("sidecar exited")
		}
		i++
		if code, b, err := Do(context.Background(), http.MethodPost, api+"/v1/chat/completions", "", body(i)); err != nil || code != http.StatusOK {
			return fmt.Errorf("chat: %d %s %v", code, b, err)
		}
		state, got, err := engineState(admin, engine)
		ids = got
		if err == nil && state != "EXACT" {
			err = fmt.Errorf("engine state %q", state)
		}
		return err
	})
	if err != nil {
		t.Fatalf("the engine never turned EXACT: %v (engine node ids %v)\nrouter:\n%s\nsidecar:\n%s",
			err, ids, router.Tail(2000), sidecar.Tail(2000))
	}
	host, _ := os.Hostname()
	if want := host + "-sidecar-" + s[0][strings.LastIndex(s[0], ":")+1:]; len(ids) != 1 || ids[0] != want {
		t.Errorf("sidecar default node id %v, want [%s]", ids, want)
	}

	// A second process claiming the router's id fails at once, naming
	// both addresses and the flag to set.
	routerID := host + "-router-" + a[2][strings.LastIndex(a[2], ":")+1:]
	c := FreeAddrs(t, 2)
	clash := Start(t, bin, "clash", dir, "sidecar", "--engine", engine, "--node-id", routerID, "--models", "x",
		"--gossip", c[0], "--join", gossip, "--metrics-addr", c[1])
	if err := testwait.Poll(15*time.Second, 50*time.Millisecond, func() error {
		if !clash.Exited() {
			return errors.New("still running")
		}
		return nil
	}); err != nil {
		t.Fatalf("a sidecar with a taken node id kept running: %v\n%s", err, clash.Tail(2000))
	}
	out := clash.Tail(3000)
	for _, want := range []string{routerID, gossip, c[0], "--node-id"} {
		if !strings.Contains(out, want) {
			t.Errorf("the conflict error does not name %s:\n%s", want, out)
		}
	}
	if !strings.Contains(router.Tail(20000), "gossip node id conflict") {
		t.Errorf("the router's log does not report the conflict:\n%s", router.Tail(2000))
	}
}

// TestFirstSecondOfAThreeRouterCluster: requests and admin calls that
// arrive while three routers start (before a leader, before the seed is
// applied) are held or told to retry: the data plane answers 200 once
// the config lands, the admin API never answers a valid token with 401,
// and /readyz is never 200 while the data plane cannot serve the route.
func TestFirstSecondOfAThreeRouterCluster(t *testing.T) {
	bin := BuildRolter(t)
	dir := t.TempDir()
	engine := StartSim(t, bin, "sim", dir)
	writeFiles(t, dir, map[string]string{
		"rolter.toml": fmt.Sprintf(`
[[providers]]
name = "engine"
api_base = %q

[[routes]]
model = "m"
targets = [{ provider = "engine", model = "meta-llama/Llama-3.1-8B-Instruct" }]
`, engine),
		"admin-token": firstRunToken, "internal-token": "first-run-internal"})
	for round := range 3 {
		t.Run(fmt.Sprintf("startup-%d", round+1), func(t *testing.T) { firstSecond(t, bin, dir, round) })
	}
}

func firstSecond(t *testing.T, bin Binary, dir string, round int) {
	type router struct{ id, api, admin, raft string }
	var rs []router
	var join []string
	addrs := FreeAddrs(t, 9)
	for i := range 3 {
		r := router{id: fmt.Sprintf("r%d", i+1), api: addrs[3*i], admin: addrs[3*i+1], raft: addrs[3*i+2]}
		rs = append(rs, r)
		join = append(join, r.id+"="+r.raft)
	}
	var procs []*Proc
	for _, r := range rs {
		procs = append(procs, Start(t, bin, fmt.Sprintf("%s-round%d", r.id, round), dir, "router",
			"--config", filepath.Join(dir, "rolter.toml"), "--http", r.api, "--admin", r.admin,
			"--node-id", r.id, "--raft", r.raft, "--join", strings.Join(join, ","), "--bootstrap-expect", "3",
			"--data-dir", filepath.Join(dir, fmt.Sprintf("data-%d-%s", round, r.id)), "--insecure-dev",
			"--admin-token-file", filepath.Join(dir, "admin-token"), "--internal-token-file", filepath.Join(dir, "internal-token"),
			"--raft-timeout", "200ms"))
	}
	defer func() {
		for _, p := range procs {
			p.Kill()
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	var mu sync.Mutex
	var problems []string
	report := func(format string, args ...any) {
		mu.Lock()
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	var held, notReady, readyAfter []time.Duration // per router: first chat's wait, admin 503s, time to ready
	start := time.Now()
	note := func(list *[]time.Duration, d time.Duration) { mu.Lock(); *list = append(*list, d); mu.Unlock() }
	chat := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	for _, r := range rs {
		wg.Add(2)
		// The data plane: the first request that reaches the port must
		// be served, not refused.
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				sent := time.Now()
				code, b, err := DoHeaders(ctx, http.MethodPost, "http://"+r.api+"/v1/chat/completions", "", chat)
				if err != nil {
					time.Sleep(5 * time.Millisecond) // not listening yet
					continue
				}
				note(&held, time.Since(sent))
				if code.Status != http.StatusOK {
					report("%s: first chat answered %d %s (Retry-After %q)", r.id, code.Status, b, code.RetryAfter)
				}
				return
			}
			report("%s: the API never answered", r.id)
		}()
		// The admin API and /readyz: hammer them from the first moment
		// until the router is ready and a valid token works.
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				ready, _, err := Do(ctx, http.MethodGet, "http://"+r.admin+"/readyz", "", "")
				if err != nil {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				if ready == http.StatusOK {
					if code, b, err := Do(ctx, http.MethodPost, "http://"+r.api+"/v1/chat/completions", "", chat); err != nil || code != http.StatusOK {
						report("%s: /readyz 200 but chat answered %d %s %v", r.id, code, b, err)
					}
				}
				h, b, err := DoHeaders(ctx, http.MethodGet, "http://"+r.admin+"/api/v1/cluster", firstRunToken, "")
				if err != nil {
					continue
				}
				switch {
				case h.Status == http.StatusOK && ready == http.StatusOK:
					note(&readyAfter, time.Since(start))
					return
				case h.Status == http.StatusOK:
				case h.Status == http.StatusServiceUnavailable && h.RetryAfter != "":
					note(&notReady, 0)
				default:
					report("%s: a valid admin token got %d %s (Retry-After %q)", r.id, h.Status, b, h.RetryAfter)
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
			report("%s: never ready with a working admin token", r.id)
		}()
	}
	wg.Wait()
	t.Logf("first chat per router answered after %v (held until the config); admin 503 not-ready answers before ready: %d; ready with a working token after %v",
		held, len(notReady), readyAfter)
	for _, p := range problems {
		t.Error(p)
	}
	if t.Failed() {
		for _, p := range procs {
			t.Logf("%s:\n%s", p.Name, p.Tail(2000))
		}
	}
}

// Status is a response's status and Retry-After.
type Status struct {
	Status     int
	RetryAfter string
}

// DoHeaders is Do that also returns Retry-After.
func DoHeaders(ctx context.Context, method, url, token, body string) (Status, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return Status{}, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := Client.Do(req)
	if err != nil {
		return Status{}, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return Status{resp.StatusCode, resp.Header.Get("Retry-After")}, b, err
}
