package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	benchrouting "github.com/rolter/rolter/bench/routing"
	"github.com/rolter/rolter/data/mooncake"
	"github.com/rolter/rolter/sim/workload"
)

// writeTrace writes a small Mooncake-format trace: conversations whose
// turns extend the previous turn's hash ids.
func writeTrace(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	next := uint64(1)
	for conv := range 6 {
		ids := []uint64{0}
		for turn := range 3 {
			ids = append(ids, next)
			next++
			fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": 16, "hash_ids": %s}`+"\n",
				conv*700+turn*2000, len(ids)*512-100, strings.ReplaceAll(fmt.Sprint(ids), " ", ","))
		}
	}
	// The lines must be in time order.
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	sortByTimestamp(t, lines)
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func sortByTimestamp(t *testing.T, lines []string) {
	t.Helper()
	ts := func(l string) int {
		var rec struct{ Timestamp int }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		return rec.Timestamp
	}
	for i := 1; i < len(lines); i++ {
		for j := i; j > 0 && ts(lines[j]) < ts(lines[j-1]); j-- {
			lines[j], lines[j-1] = lines[j-1], lines[j]
		}
	}
}

func TestBenchRoutingWritesRowsAndPlots(t *testing.T) {
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "rows.json")
	var out, errOut bytes.Buffer
	args := []string{"--trace", writeTrace(t), "--engines", "3", "--routers", "1,2", "--load", "0.5",
		"--strategies", "round_robin,precise_cache_aware", "--json", jsonPath, "--plots", dir, "--plot-loads", "0.3,0.6"}
	if err := run(t.Context(), append([]string{"bench", "routing"}, args...), &out, &errOut); err != 0 {
		t.Fatalf("exit %d\n%s%s", err, out.String(), errOut.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rows []benchrouting.Row
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		seen[fmt.Sprintf("%s/%d", r.Strategy, r.Routers)] = true
		if r.TTFTP50 <= 0 || r.TTFTP50 > r.TTFTP90 || r.TTFTP90 > r.TTFTP99 || r.Throughput <= 0 {
			t.Errorf("%s/%d: implausible row %+v", r.Strategy, r.Routers, r)
		}
		if r.VsOracle["hit_rate"] == 0 && r.HitRate > 0 {
			t.Errorf("%s/%d: no ratio to the oracle", r.Strategy, r.Routers)
		}
	}
	for _, want := range []string{"oracle/1", "oracle/2", "round_robin/1", "round_robin/2", "precise_cache_aware/2"} {
		if !seen[want] {
			t.Errorf("no row %s in %v", want, seen)
		}
	}
	for _, png := range []string{"ttft_p90_vs_load.png", "hit_rate_vs_routers.png"} {
		if st, err := os.Stat(filepath.Join(dir, png)); err != nil || st.Size() < 1000 {
			t.Errorf("plot %s missing or empty: %v", png, err)
		}
	}
}

func TestBenchDispatch(t *testing.T) {
	for _, args := range [][]string{{"bench"}, {"bench", "nope"}, {"bench", "routing", "--routers", "0"},
		{"bench", "routing", "--strategies", "nope"}, {"bench", "overhead", "--modes", "sideways"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(t.Context(), args, &out, &errOut); code != 2 {
				t.Errorf("exit %d, want 2 (usage)\n%s", code, errOut.String())
			}
		})
	}
}

// A plain clone has no trace beside it: with no --trace the benchmark
// replays the Mooncake trace the binary embeds, and says so.
func TestBenchRoutingDefaultsToTheEmbeddedTrace(t *testing.T) {
	t.Chdir(t.TempDir()) // nothing around: no relative path can help
	var out, errOut bytes.Buffer
	args := []string{"bench", "routing", "--limit", "60", "--engines", "2", "--routers", "1", "--strategies", "round_robin"}
	if code := run(t.Context(), args, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "trace "+mooncake.Name+", 60 requests") {
		t.Errorf("report does not name the embedded trace and its 60 requests:\n%s", out.String())
	}
}

func TestEmbeddedTraceIsTheWholeMooncakeTrace(t *testing.T) {
	recs, err := workload.ReadTrace(mooncake.Open(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 12031 {
		t.Fatalf("embedded trace has %d records, the Mooncake conversation trace 12031", len(recs))
	}
}
