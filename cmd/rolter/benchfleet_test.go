package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	benchfleet "github.com/rolter/rolter/bench/fleet"
	benchrouting "github.com/rolter/rolter/bench/routing"
	"github.com/rolter/rolter/localfleet"
	"github.com/rolter/rolter/sim/workload"
)

// TestBenchFleetPlumbing runs `rolter bench fleet` small: one router, two
// sims with their sidecars, 20 requests that all share a 1024-token prefix.
// The children are this test binary acting as rolter. It checks the row on
// stdout, the JSON shape, and that the engines' own counters saw the
// shared prefix hit (a broken replay, counter scrape or KV path reads 0).
func TestBenchFleetPlumbing(t *testing.T) {
	if !localfleet.CgoBuild() {
		t.Skip("bench fleet needs a cgo build (ZMQ KV events)")
	}
	t.Setenv(execEnv, "1") // the children this test starts run as rolter
	var b strings.Builder
	for i := range 20 {
		// Hash ids 0 and 1 are shared by every request; the rest is private.
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": 8, "hash_ids": [0, 1, %d]}`+"\n",
			i*250, 2*512+200, 100+i)
	}
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	if err := os.WriteFile(trace, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "rows.json")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := runBenchFleet(ctx, []string{"--trace", trace, "--limit", "20", "--engines", "2", "--routers", "1",
		"--strategies", "precise_cache_aware", "--speed", "10", "--load", "0.5", "--json", out,
		"--dir", filepath.Join(dir, "runs")}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench fleet: %v\nstderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "precise_cache_aware") || !strings.Contains(stdout.String(), "agreement:") {
		t.Fatalf("no row or agreement line on stdout:\n%s", stdout.String())
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Strategy  string         `json:"strategy"`
		Routers   int            `json:"routers"`
		Failed    int            `json:"failed"`
		Measured  map[string]any `json:"measured"`
		Predicted map[string]any `json:"predicted"`
		Client    map[string]any `json:"client"`
	}
	if err := json.Unmarshal(raw, &rows); err != nil {
		t.Fatalf("--json: %v\n%s", err, raw)
	}
	if len(rows) != 1 || rows[0].Strategy != "precise_cache_aware" || rows[0].Routers != 1 {
		t.Fatalf("want one precise_cache_aware row at 1 router, got %s", raw)
	}
	r := rows[0]
	if r.Failed != 0 {
		t.Fatalf("%d requests failed; stderr:\n%s", r.Failed, stderr.String())
	}
	num := func(fig map[string]any, k string) float64 {
		v, ok := fig[k].(float64)
		if !ok {
			t.Fatalf("row lacks the number %s: %s", k, raw)
		}
		return v
	}
	for _, fig := range []map[string]any{r.Measured, r.Predicted, r.Client} {
		if p50, p90 := num(fig, "ttft_p50_ms"), num(fig, "ttft_p90_ms"); p50 <= 0 || p90 < p50 {
			t.Fatalf("implausible TTFT percentiles: %s", raw)
		}
	}
	// At least 18 of 20 requests find the 1024 shared tokens of their 1224
	// wherever they land on two engines: a hit rate near 0.75.
	if m, p := num(r.Measured, "hit_rate"), num(r.Predicted, "hit_rate"); m <= 0.5 || p <= 0.5 {
		t.Fatalf("hit rate measured %.3f, predicted %.3f; want the shared prefix to hit", m, p)
	}
}

// The prediction beside each bench fleet row is what `rolter bench
// routing` simulates for the command line bench fleet prints, figure for
// figure: one code path, not a second model.
func TestBenchFleetPredictsWhatBenchRoutingSimulates(t *testing.T) {
	trace := writeTrace(t)
	f, err := os.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := workload.ReadTrace(f, 0)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	reqs := workload.FromTrace(recs, false)
	benchrouting.SpreadBatches(reqs, 3)
	cfg := benchfleet.Config{Requests: reqs, Engines: 2, Load: 0.8, Seed: 3, GossipDelay: 450 * time.Millisecond,
		ResidencyDelay: 90 * time.Millisecond, PeerDelay: 75 * time.Millisecond}
	plan, err := benchfleet.NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "routing.json")
	err = runBenchRouting(context.Background(), []string{"--trace", trace, "--engines", "2", "--routers", "1,2",
		"--strategies", "round_robin,precise_cache_aware", "--load", "0.8", "--seed", "3", "--gossip-delay", "450ms",
		"--kv-delay", "90ms", "--peer-delay", "75ms", "--arrival", "rr", "--spread-batches", "--json", out}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rows []benchrouting.Row
	if err := json.Unmarshal(raw, &rows); err != nil {
		t.Fatal(err)
	}
	for _, routers := range []int{1, 2} {
		for _, s := range []string{"round_robin", "precise_cache_aware"} {
			got, err := benchfleet.Predict(context.Background(), cfg, plan, s, routers)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(rows, func(r benchrouting.Row) bool { return r.Strategy == s && r.Routers == routers })
			if i < 0 {
				t.Fatalf("bench routing has no %s row at %d routers", s, routers)
			}
			want := rows[i]
			if got.HitRate != want.HitRate || got.TTFTP50 != want.TTFTP50 || got.TTFTP90 != want.TTFTP90 || got.E2EP50 != want.E2EP50 {
				t.Errorf("%s at %d routers: bench fleet predicts hit %.4f ttft %.1f/%.1f e2e %.1f, bench routing %.4f %.1f/%.1f %.1f",
					s, routers, got.HitRate, got.TTFTP50, got.TTFTP90, got.E2EP50, want.HitRate, want.TTFTP50, want.TTFTP90, want.E2EP50)
			}
		}
	}
}
