package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

// meshTOML: two sim engines behind precise_cache_aware, and a discover
// route over whatever engine announces the sims' model.
const meshTOML = `
[[providers]]
name = "sim-a"
api_base = "%s"

[[providers]]
name = "sim-b"
api_base = "%s/v1"

[[routes]]
model = "pc"
strategy = "precise_cache_aware"
targets = [
  { provider = "sim-a", model = "meta-llama/Llama-3.1-8B-Instruct" },
  { provider = "sim-b", model = "meta-llama/Llama-3.1-8B-Instruct" },
]

[[routes]]
model = "meta-llama/Llama-3.1-8B-Instruct"
strategy = "power_of_two"
discover = true
`

// kvEngine is a sim publishing KV events and the sidecar beside it.
type kvEngine struct {
	URL     string
	KV      string // tcp:// endpoint the sim binds
	Replay  string // tcp:// endpoint of the sim's event replay
	Sim     *Proc
	Sidecar *Proc
}

// startKVSim starts a sim publishing KV events, with the replay endpoint
// vLLM has: a ZMQ subscriber gets nothing published before it is
// connected, and the sidecar's subscription may land after the first
// requests' events (a busy machine slows the connect, not the requests);
// the sidecar then replays what it missed, as with vLLM, instead of
// reading the engine DEGRADED until its cache is cleared.
func startKVSim(t *testing.T, bin Binary, dir, name string, extra ...string) *kvEngine {
	t.Helper()
	a := FreeAddrs(t, 2)
	kv, replay := "tcp://"+a[0], "tcp://"+a[1]
	url, p := StartSimArgs(t, bin, name, dir, append([]string{"--instant", "--kv-events", kv, "--kv-events-dial", "bind",
		"--kv-events-replay", replay}, extra...)...)
	return &kvEngine{URL: url, KV: kv, Replay: replay, Sim: p}
}

func startSidecarProc(t *testing.T, bin Binary, dir, name string, e *kvEngine, seeds string) {
	t.Helper()
	addrs := FreeAddrs(t, 2)
	e.Sidecar = Start(t, bin, name, dir, "sidecar", "--engine", e.URL, "--kv-events", e.KV, "--kv-events-replay", e.Replay,
		"--node-id", name, "--gossip", addrs[0], "--join", seeds, "--insecure-dev", "--metrics-addr", addrs[1])
}

// gossipRouter is one `rolter router --gossip` process (its own Raft
// store: the tests here exercise the data plane and the mesh).
type gossipRouter struct {
	API, Admin, Gossip string
	Proc               *Proc
}

const meshAdminToken = "mesh-admin-token"

func startGossipRouter(t *testing.T, bin Binary, dir, id, toml, seeds string) *gossipRouter {
	t.Helper()
	for name, content := range map[string]string{id + ".toml": toml, "admin-token": meshAdminToken} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a := FreeAddrs(t, 4)
	r := &gossipRouter{API: "http://" + a[0], Admin: "http://" + a[1], Gossip: a[3]}
	args := []string{"router", "--config", filepath.Join(dir, id+".toml"), "--http", a[0], "--admin", a[1],
		"--node-id", id, "--raft", a[2], "--data-dir", filepath.Join(dir, "data-"+id), "--insecure-dev",
		"--admin-token-file", filepath.Join(dir, "admin-token"), "--gossip", a[3]}
	if seeds != "" {
		args = append(args, "--join", seeds)
	}
	r.Proc = Start(t, bin, id, dir, args...)
	err := testwait.Poll(60*time.Second, 50*time.Millisecond, func() error {
		if r.Proc.Exited() {
			return errors.New("exited")
		}
		code, body, err := Do(context.Background(), http.MethodGet, r.Admin+"/readyz", "", "")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d %s", code, bytes.TrimSpace(body))
		}
		return err
	})
	if err != nil {
		t.Fatalf("router %s: %v\n%s", id, err, r.Proc.Tail(3000))
	}
	return r
}

// clusterEngine is one entry of GET /api/v1/cluster's engines[].
type clusterEngine struct {
	NodeID         string  `json:"node_id"`
	EngineURL      string  `json:"engine_url"`
	State          string  `json:"state"`
	AgeMS          int64   `json:"age_ms"`
	ResidentBlocks int     `json:"resident_blocks"`
	Running        uint64  `json:"running"`
	Waiting        uint64  `json:"waiting"`
	KVUsage        float64 `json:"kv_usage"`
	KVEvents       bool    `json:"kv_events"`
}

// clusterEngines reads a router's GET /api/v1/cluster engines by URL.
func clusterEngines(ctx context.Context, admin, token string) (map[string]clusterEngine, error) {
	code, body, err := Do(ctx, http.MethodGet, admin+"/api/v1/cluster", token, "")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /api/v1/cluster: %d %s", code, body)
	}
	var v struct {
		Engines []clusterEngine `json:"engines"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, err
	}
	out := map[string]clusterEngine{}
	for _, e := range v.Engines {
		out[e.EngineURL] = e
	}
	return out, nil
}

// waitEngineState polls a router's /api/v1/cluster every 50 ms until the
// engine at url is in state, or within passes.
func waitEngineState(ctx context.Context, admin, token, url, state string, within time.Duration) error {
	return testwait.Poll(within, 50*time.Millisecond, func() error {
		es, err := clusterEngines(ctx, admin, token)
		if err != nil {
			return err
		}
		if s := es[url].State; s != state {
			return fmt.Errorf("state %s", s)
		}
		return nil
	})
}

// simCounters reads the prefix-cache counters of a sim's /metrics.
func simCounters(ctx context.Context, base string) (hits, queries float64, err error) {
	code, body, err := Do(ctx, http.MethodGet, base+"/metrics", "", "")
	if err != nil || code != http.StatusOK {
		return 0, 0, fmt.Errorf("metrics %s: %d %v", base, code, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "{")
		v, _ := strconv.ParseFloat(strings.TrimSpace(val), 64)
		switch name {
		case "vllm:prefix_cache_hits_total":
			hits += v
		case "vllm:prefix_cache_queries_total":
			queries += v
		}
	}
	return hits, queries, sc.Err()
}

func tokenPrompt(start, n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(start + i)
	}
	return "[" + strings.Join(ids, ",") + "]"
}

func complete(ctx context.Context, api, model, prompt string) error {
	body := fmt.Sprintf(`{"model":%q,"prompt":%s,"max_tokens":2}`, model, prompt)
	code, resp, err := Do(ctx, http.MethodPost, api+"/v1/completions", "", body)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("completions: %d %s", code, bytes.TrimSpace(resp))
	}
	return err
}

// TestMeshProcesses is issue 5's real-process acceptance in short: two
// `rolter sim` engines publishing KV events, a `rolter sidecar` beside
// each, one `rolter router --gossip`.
//   - precise_cache_aware sends a repeated token-id prompt to the engine
//     that holds it (the other engine never sees it);
//   - the discover route serves through both engines with no target listed;
//   - a sidecar killed: its engine is STALE in /api/v1/cluster within 10 s
//     and still serves traffic on load alone.
func TestMeshProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five processes")
	}
	bin := SharedRolter(t, true)
	dir := t.TempDir()
	a := startKVSim(t, bin, dir, "sim-a")
	b := startKVSim(t, bin, dir, "sim-b")
	r := startGossipRouter(t, bin, dir, "r1", fmt.Sprintf(meshTOML, a.URL, b.URL), "")
	startSidecarProc(t, bin, dir, "side-a", a, r.Gossip)
	startSidecarProc(t, bin, dir, "side-b", b, r.Gossip)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	err := testwait.Poll(20*time.Second, 50*time.Millisecond, func() error {
		es, err := clusterEngines(ctx, r.Admin, meshAdminToken)
		if err != nil {
			return err
		}
		for _, e := range []*kvEngine{a, b} {
			if es[e.URL].State == "" || es[e.URL].State == "STALE" {
				return fmt.Errorf("engine %s: %+v", e.URL, es[e.URL])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("sidecars not in the view: %v\n%s\n%s", err, a.Sidecar.Tail(2000), r.Proc.Tail(2000))
	}

	// The discover route gets its targets once the router re-applied its
	// config after the sidecars joined; its traffic also warms the ZMQ
	// subscriptions until both sidecars apply events (EXACT: a sidecar
	// whose subscription landed after the first events replays them).
	t.Run("discover route serves through the announced engines", func(t *testing.T) {
		i := 0
		err := testwait.Poll(20*time.Second, 100*time.Millisecond, func() error {
			i++
			if err := complete(ctx, r.API, "meta-llama/Llama-3.1-8B-Instruct", tokenPrompt(900000+i*40, 32)); err != nil {
				return err
			}
			es, err := clusterEngines(ctx, r.Admin, meshAdminToken)
			if err != nil {
				return err
			}
			if es[a.URL].State != "EXACT" || es[b.URL].State != "EXACT" {
				return fmt.Errorf("a %+v, b %+v", es[a.URL], es[b.URL])
			}
			return nil
		})
		if err != nil {
			t.Fatalf("after %d requests: %v", i, err)
		}
	})

	base := map[string]int{}
	es, err := clusterEngines(ctx, r.Admin, meshAdminToken)
	if err != nil {
		t.Fatal(err)
	}
	for u, e := range es {
		base[u] = e.ResidentBlocks
	}
	prompt := tokenPrompt(1000, 256)
	if err := complete(ctx, r.API, "pc", prompt); err != nil {
		t.Fatal(err)
	}
	var holder, other *kvEngine
	err = testwait.Poll(10*time.Second, 50*time.Millisecond, func() error {
		es, err := clusterEngines(ctx, r.Admin, meshAdminToken)
		if err != nil {
			return err
		}
		ea, eb := es[a.URL], es[b.URL]
		switch {
		case ea.ResidentBlocks >= base[a.URL]+16 && eb.ResidentBlocks < base[b.URL]+16 && ea.State == "EXACT":
			holder, other = a, b
		case eb.ResidentBlocks >= base[b.URL]+16 && ea.ResidentBlocks < base[a.URL]+16 && eb.State == "EXACT":
			holder, other = b, a
		default:
			return fmt.Errorf("a %+v, b %+v", ea, eb)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("residency of the first request: %v\n%s\n%s", err, a.Sidecar.Tail(1500), a.Sim.Tail(1500))
	}
	t.Run("precise_cache_aware routes a repeated prompt to its holder", func(t *testing.T) {
		hitsBefore, _, _ := simCounters(ctx, holder.URL)
		_, otherBefore, _ := simCounters(ctx, other.URL)
		const repeats = 8
		for range repeats {
			if err := complete(ctx, r.API, "pc", prompt); err != nil {
				t.Fatal(err)
			}
		}
		hits, _, _ := simCounters(ctx, holder.URL)
		_, otherQueries, _ := simCounters(ctx, other.URL)
		if otherQueries != otherBefore {
			t.Fatalf("the engine without the prompt got %v prompt tokens of it", otherQueries-otherBefore)
		}
		if hits-hitsBefore < repeats*240 {
			t.Fatalf("holder's prefix-cache hits grew by %v tokens over %d repeats of a 256-token prompt", hits-hitsBefore, repeats)
		}
	})

	t.Run("a killed sidecar's engine goes STALE and keeps serving", func(t *testing.T) {
		holder.Sidecar.Kill()
		killed := time.Now()
		err := waitEngineState(ctx, r.Admin, meshAdminToken, holder.URL, "STALE", 10*time.Second)
		if err != nil {
			t.Fatalf("engine of the killed sidecar: %v", err)
		}
		t.Logf("STALE %v after the sidecar was killed", time.Since(killed).Round(10*time.Millisecond))
		_, before, _ := simCounters(ctx, holder.URL)
		for i := range 20 {
			if err := complete(ctx, r.API, "pc", tokenPrompt(50000+i*300, 64)); err != nil {
				t.Fatal(err)
			}
		}
		_, after, _ := simCounters(ctx, holder.URL)
		if after == before {
			t.Fatal("the engine whose sidecar died got none of 20 requests")
		}
	})
}
