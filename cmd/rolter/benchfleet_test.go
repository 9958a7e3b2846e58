package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchFleetPlumbing runs `rolter bench fleet` small: one router, two
// sims with their sidecars, 20 requests that all share a 1024-token prefix.
// The children are this test binary acting as rolter. It checks the row on
// stdout, the JSON shape, and that the engines' own counters saw the
// shared prefix hit (a broken replay, counter scrape or KV path reads 0).
func TestBenchFleetPlumbing(t *testing.T) {
	if !cgoBuild() {
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
	for _, fig := range []map[string]any{r.Measured, r.Predicted} {
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
