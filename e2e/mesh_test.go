//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
	"github.com/rolter/rolter/sim/tokenizer"
)

// Issue 5's real-process acceptance for the gossip mesh: `rolter sim`
// engines publishing KV events over ZMQ, a `rolter sidecar` beside each,
// `rolter router --gossip` replicas, all on loopback.
//
// The sidecar's ZMQ subscriber is cgo, so these tests build with
// BuildRolterCgo.

// meshEngine is a sim publishing KV events and the sidecar beside it.
type meshEngine struct {
	URL, KV string
	Sim     *Proc
	Sidecar *Proc
}

type meshRouter struct {
	ID, API, Admin, Gossip string
	Proc                   *Proc
}

// meshPool is one fleet: engines with sidecars and gossip routers. The
// routers find each other by gossip only (--join names the first one's
// gossip address) and form one Raft cluster through it.
type meshPool struct {
	t       *testing.T
	bin     Binary
	dir     string
	Engines []*meshEngine
	Routers []*meshRouter
}

const meshToken = "mesh-e2e-admin-token"

func startMeshPool(t *testing.T, bin Binary, engines, routers int, toml func([]*meshEngine) string, simArgs ...string) *meshPool {
	t.Helper()
	p := &meshPool{t: t, bin: bin, dir: t.TempDir()}
	for i := range engines {
		kv := "tcp://" + FreeAddrs(t, 1)[0]
		url, proc := StartSimArgs(t, bin, fmt.Sprintf("sim-%d", i), p.dir,
			append([]string{"--kv-events", kv, "--kv-events-dial", "bind"}, simArgs...)...)
		p.Engines = append(p.Engines, &meshEngine{URL: url, KV: kv, Sim: proc})
	}
	cfg := toml(p.Engines)
	for _, f := range []struct{ name, body string }{{"rolter.toml", cfg}, {"admin-token", meshToken}, {"internal-token", "mesh-e2e-internal"}} {
		if err := os.WriteFile(filepath.Join(p.dir, f.name), []byte(f.body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for i := range routers {
		a := FreeAddrs(t, 4)
		r := &meshRouter{ID: fmt.Sprintf("r%d", i+1), API: "http://" + a[0], Admin: "http://" + a[1], Gossip: a[3]}
		args := []string{"router", "--config", filepath.Join(p.dir, "rolter.toml"), "--http", a[0], "--admin", a[1],
			"--node-id", r.ID, "--raft", a[2], "--data-dir", filepath.Join(p.dir, "data-"+r.ID), "--insecure-dev",
			"--admin-token-file", filepath.Join(p.dir, "admin-token"), "--internal-token-file", filepath.Join(p.dir, "internal-token"),
			"--bootstrap-expect", strconv.Itoa(routers), "--gossip", a[3]}
		if i > 0 {
			args = append(args, "--join", p.Routers[0].Gossip)
		}
		r.Proc = Start(t, bin, r.ID, p.dir, args...)
		p.Routers = append(p.Routers, r)
	}
	for _, r := range p.Routers {
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
			t.Fatalf("router %s: %v\n%s", r.ID, err, r.Proc.Tail(3000))
		}
	}
	if routers > 1 {
		p.raftFormed()
	}
	for i, e := range p.Engines {
		a := FreeAddrs(t, 2)
		e.Sidecar = Start(t, bin, fmt.Sprintf("sidecar-%d", i), p.dir, "sidecar", "--engine", e.URL, "--kv-events", e.KV,
			"--node-id", fmt.Sprintf("sidecar-%d", i), "--gossip", a[0], "--join", p.Routers[0].Gossip,
			"--insecure-dev", "--metrics-addr", a[1])
	}
	p.warm()
	return p
}

// raftFormed waits until the first router's /api/v1/cluster shows every
// router as a voter of one Raft cluster: they found each other by gossip.
func (p *meshPool) raftFormed() {
	p.t.Helper()
	err := testwait.Poll(30*time.Second, 100*time.Millisecond, func() error {
		code, body, err := Do(context.Background(), http.MethodGet, p.Routers[0].Admin+"/api/v1/cluster", meshToken, "")
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("%d %v", code, err)
		}
		var v struct {
			Leader  string `json:"leader"`
			Routers []struct {
				NodeID   string `json:"node_id"`
				RaftRole string `json:"raft_role"`
			} `json:"routers"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			return err
		}
		voters := 0
		for _, r := range v.Routers {
			if r.RaftRole == "leader" || r.RaftRole == "follower" {
				voters++
			}
		}
		if v.Leader == "" || voters != len(p.Routers) {
			return fmt.Errorf("leader %q, routers %+v", v.Leader, v.Routers)
		}
		return nil
	})
	if err != nil {
		p.t.Fatalf("routers did not form one Raft cluster by gossip: %v", err)
	}
}

// warm sends each engine directly a few one-block prompts until every
// router sees every engine EXACT. ZMQ subscribers drop what is published
// before they are connected, so a sidecar whose subscription lands after
// the first prompts' events joins the stream mid-way (DEGRADED for good,
// the pool runs without replay); the engine's cache is cleared then,
// which makes its view EXACT again.
func (p *meshPool) warm() {
	p.t.Helper()
	ctx := context.Background()
	n := 0
	cleared := map[*meshEngine]bool{}
	err := testwait.Poll(30*time.Second, 100*time.Millisecond, func() error {
		n++
		for _, e := range p.Engines {
			body := fmt.Sprintf(`{"prompt":%s,"max_tokens":1}`, meshIDs(7_000_000+n*17, 16))
			if code, b, err := Do(ctx, http.MethodPost, e.URL+"/v1/completions", "", body); err != nil || code != http.StatusOK {
				return fmt.Errorf("warm %s: %d %v %s", e.URL, code, err, b)
			}
		}
		for _, r := range p.Routers {
			es, err := clusterEngines(ctx, r.Admin, meshToken)
			if err != nil {
				return err
			}
			for _, e := range p.Engines {
				switch es[e.URL].State {
				case "EXACT":
					continue
				case "DEGRADED":
					// DEGRADED until the sidecar's first event; for good if
					// its subscription reached the engine after the first
					// events (a ZMQ subscriber gets nothing sent before it
					// is connected, and this pool has no replay), which the
					// sidecar logs: then the engine clears its cache.
					if !cleared[e] && strings.Contains(e.Sidecar.Tail(8000), "joined the stream mid-way") {
						if code, b, err := Do(ctx, http.MethodPost, e.URL+"/sim/kv/clear", "", ""); err != nil || code != http.StatusNoContent {
							return fmt.Errorf("clearing %s: %d %v %s", e.URL, code, err, b)
						}
						cleared[e] = true
						p.t.Logf("%s: its sidecar joined the KV events mid-way; cache cleared", e.URL)
					}
				}
				return fmt.Errorf("router %s sees %s as %+v", r.ID, e.URL, es[e.URL])
			}
		}
		return nil
	})
	if err != nil {
		var tails strings.Builder
		for i, e := range p.Engines {
			fmt.Fprintf(&tails, "\nsidecar-%d (exited %v):\n%s", i, e.Sidecar.Exited(), e.Sidecar.Tail(1500))
		}
		p.t.Fatalf("pool not converged: %v%s", err, tails.String())
	}
}

// meshPrefixCounters sums vllm:prefix_cache_hits_total and
// vllm:prefix_cache_queries_total over the engines' /metrics.
func meshPrefixCounters(ctx context.Context, engines []*meshEngine) (hits, queries float64, err error) {
	for _, e := range engines {
		code, body, err := Do(ctx, http.MethodGet, e.URL+"/metrics", "", "")
		if err != nil || code != http.StatusOK {
			return 0, 0, fmt.Errorf("metrics %s: %d %v", e.URL, code, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			name, val, ok := strings.Cut(sc.Text(), " ")
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
	}
	return hits, queries, nil
}

// meshMetric sums the samples of metric whose labels contain match on a
// /metrics page under base.
func meshMetric(ctx context.Context, base, metric, match string) float64 {
	code, body, err := Do(ctx, http.MethodGet, base+"/metrics", "", "")
	if err != nil || code != http.StatusOK {
		return 0
	}
	sum := 0.0
	for line := range strings.SplitSeq(string(body), "\n") {
		if strings.HasPrefix(line, metric+"{") && strings.Contains(line, match) {
			_, val, _ := strings.Cut(line, "} ")
			v, _ := strconv.ParseFloat(strings.TrimSpace(val), 64)
			sum += v
		}
	}
	return sum
}

func meshIDs(start, n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(start + i)
	}
	return "[" + strings.Join(ids, ",") + "]"
}

// meshWorkload is synthetic chat with shared prefixes: every request is one
// of groups system prompts (about 400 tokens) plus a unique question. The
// prompt goes as text (cache_aware reads it) with its token ids in
// x-rolter-vllm-token-ids (precise_cache_aware keys them); the sim
// tokenizes the text to the same ids.
type meshRequest struct {
	body, ids string
}

func meshWorkload(seed uint64, groups, n int) []meshRequest {
	rng := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
	words := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
		"kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"}
	sentence := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[rng.IntN(len(words))])
		}
		return b.String()
	}
	systems := make([]string, groups)
	for i := range systems {
		systems[i] = fmt.Sprintf("System %d. You are assistant number %d. ", i, i) + sentence(350) + "\n"
	}
	out := make([]meshRequest, n)
	for i := range out {
		g := rng.IntN(groups)
		text := systems[g] + fmt.Sprintf("Question %d: ", i) + sentence(40)
		toks := tokenizer.Encode(nil, text)
		ids := make([]string, len(toks))
		for j, id := range toks {
			ids[j] = strconv.FormatUint(uint64(id), 10)
		}
		body, _ := json.Marshal(map[string]any{"model": "chat", "prompt": text, "max_tokens": 4})
		out[i] = meshRequest{body: string(body), ids: strings.Join(ids, ",")}
	}
	return out
}

// meshDrive sends the requests, spread round-robin over the routers, from
// workers concurrent clients; it returns the failures.
func meshDrive(ctx context.Context, routers []*meshRouter, reqs []meshRequest, workers int) (failed int, first error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r := routers[i%len(routers)]
				code, body, err := Do(ctx, http.MethodPost, r.API+"/v1/completions", "", reqs[i].body,
					"x-rolter-vllm-token-ids", reqs[i].ids)
				if err == nil && code != http.StatusOK {
					err = fmt.Errorf("%s: %d %s", r.ID, code, bytes.TrimSpace(body))
				}
				if err != nil {
					mu.Lock()
					failed++
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range reqs {
		next <- i
	}
	close(next)
	wg.Wait()
	return failed, first
}

func meshChatTOML(strategy string) func([]*meshEngine) string {
	return func(es []*meshEngine) string {
		var b strings.Builder
		for i, e := range es {
			fmt.Fprintf(&b, "[[providers]]\nname = \"e%d\"\napi_base = %q\n\n", i, e.URL)
		}
		fmt.Fprintf(&b, "[[routes]]\nmodel = \"chat\"\nstrategy = %q\ntargets = [\n", strategy)
		for i := range es {
			fmt.Fprintf(&b, "  { provider = \"e%d\", model = \"meta-llama/Llama-3.1-8B-Instruct\" },\n", i)
		}
		b.WriteString("]\n")
		return b.String()
	}
}

// TestMeshHitRateAcrossRouters: 4 sims with sidecars, the same shared-prefix
// workload through 1 router and through 3 routers (requests spread
// round-robin); the sims' measured prefix-cache hit rate with 3 routers is
// at least 95% of the 1-router figure, for cache_aware (prefix
// observations shared between routers) and for precise_cache_aware (the
// sidecars' residency gossiped to every router).
func TestMeshHitRateAcrossRouters(t *testing.T) {
	bin := BuildRolterCgo(t)
	const groups, requests, workers = 24, 480, 6
	reqs := meshWorkload(5, groups, requests)
	for _, strategy := range []string{"cache_aware", "precise_cache_aware"} {
		rates := map[int]float64{}
		for _, routers := range []int{1, 3} {
			p := startMeshPool(t, bin, 4, routers, meshChatTOML(strategy), "--speed", "20", "--kv-blocks", "3000")
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			h0, q0, err := meshPrefixCounters(ctx, p.Engines)
			if err != nil {
				t.Fatal(err)
			}
			failed, first := meshDrive(ctx, p.Routers, reqs, workers)
			h1, q1, err := meshPrefixCounters(ctx, p.Engines)
			defer cancel()
			if err != nil {
				t.Fatal(err)
			}
			if failed > 0 {
				t.Fatalf("%s, %d routers: %d of %d requests failed: %v", strategy, routers, failed, requests, first)
			}
			rates[routers] = (h1 - h0) / (q1 - q0)
			imported := 0.0
			for _, r := range p.Routers {
				imported += meshMetric(ctx, r.Admin, "rolter_mesh_learned_records_total", `event="imported"`)
			}
			t.Logf("%s with %d router(s): prefix-cache hit rate %.4f (%.0f of %.0f prompt tokens); "+
				"%.0f learned records imported from other routers", strategy, routers, rates[routers], h1-h0, q1-q0, imported)
			if strategy == "cache_aware" && routers > 1 && imported == 0 {
				t.Errorf("cache_aware with %d routers imported no prefix observation from the others", routers)
			}
			for _, e := range p.Engines {
				e.Sidecar.Kill()
				e.Sim.Kill()
			}
			for _, r := range p.Routers {
				r.Proc.Kill()
			}
		}
		if rates[3] < 0.95*rates[1] {
			t.Errorf("%s: 3-router hit rate %.4f is below 95%% of the 1-router %.4f", strategy, rates[3], rates[1])
		} else {
			t.Logf("%s: 3 routers reach %.1f%% of the 1-router hit rate", strategy, 100*rates[3]/rates[1])
		}
	}
}

// TestMeshPreciseRoutingAndStaleness: with one router, a repeated token-id
// prompt goes to the engine holding it; a killed sidecar's engine turns
// STALE in /api/v1/cluster within 10 s and keeps serving on load alone.
func TestMeshPreciseRoutingAndStaleness(t *testing.T) {
	bin := BuildRolterCgo(t)
	p := startMeshPool(t, bin, 2, 1, meshChatTOML("precise_cache_aware"), "--instant")
	r := p.Routers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before, err := clusterEngines(ctx, r.Admin, meshToken)
	if err != nil {
		t.Fatal(err)
	}
	prompt := meshIDs(1000, 512)
	send := func(prompt string) {
		t.Helper()
		body := fmt.Sprintf(`{"model":"chat","prompt":%s,"max_tokens":2}`, prompt)
		if code, b, err := Do(ctx, http.MethodPost, r.API+"/v1/completions", "", body); err != nil || code != http.StatusOK {
			t.Fatalf("completions: %d %v %s", code, err, b)
		}
	}
	send(prompt)
	var holder, other *meshEngine
	err = testwait.Poll(10*time.Second, 50*time.Millisecond, func() error {
		es, err := clusterEngines(ctx, r.Admin, meshToken)
		if err != nil {
			return err
		}
		grew := func(e *meshEngine) bool { return es[e.URL].ResidentBlocks >= before[e.URL].ResidentBlocks+32 }
		switch a, b := p.Engines[0], p.Engines[1]; {
		case grew(a) && !grew(b):
			holder, other = a, b
		case grew(b) && !grew(a):
			holder, other = b, a
		default:
			return fmt.Errorf("residency: %+v", es)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, otherQ0, _ := meshPrefixCounters(ctx, []*meshEngine{other})
	h0, _, _ := meshPrefixCounters(ctx, []*meshEngine{holder})
	for range 20 {
		send(prompt)
	}
	_, otherQ1, _ := meshPrefixCounters(ctx, []*meshEngine{other})
	h1, _, _ := meshPrefixCounters(ctx, []*meshEngine{holder})
	t.Logf("20 repeats: holder's prefix hits +%.0f tokens, other engine's queries +%.0f", h1-h0, otherQ1-otherQ0)
	if otherQ1 != otherQ0 || h1-h0 < 20*496 {
		t.Fatalf("repeats did not all go to the holder")
	}

	holder.Sidecar.Kill()
	killed := time.Now()
	err = waitEngineState(ctx, r.Admin, meshToken, holder.URL, "STALE", 10*time.Second)
	if err != nil {
		t.Fatalf("killed sidecar's engine: %v", err)
	}
	t.Logf("engine STALE %v after its sidecar was killed", time.Since(killed).Round(10*time.Millisecond))
	_, q0, _ := meshPrefixCounters(ctx, []*meshEngine{holder})
	for i := range 30 {
		send(meshIDs(3_000_000+i*1000, 64))
	}
	_, q1, _ := meshPrefixCounters(ctx, []*meshEngine{holder})
	if q1 == q0 {
		t.Fatal("the engine whose sidecar died got none of 30 requests")
	}
	t.Logf("after the kill it served %.0f prompt tokens of 30 requests (load alone)", q1-q0)
}
