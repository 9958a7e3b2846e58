package overhead

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The generator sends every scheduled request even when the server holds
// some of them: an open loop does not wait for answers before sending.
func TestOpenLoopDoesNotWaitForAnswers(t *testing.T) {
	var got atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got.Add(1) == 1 {
			<-release // the first request is held until every other one arrived
		}
		_, _ = io.WriteString(w, "{}")
	}))
	defer srv.Close()
	const rate, n = 200.0, 20
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for got.Load() < n && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		close(release)
	}()
	s := openLoop(t.Context(), newGenerator(1), func(int) string { return srv.URL }, request{path: "/", body: []byte("{}")}, rate, n*time.Second/rate)
	if s.sent != n || s.errors != 0 || got.Load() != n {
		t.Fatalf("sent %d, errors %d, server saw %d; want %d, 0, %d", s.sent, s.errors, got.Load(), n, n)
	}
	// The held request waited for the other 19 to be sent (≥ 95 ms of
	// schedule), and its latency counts from its scheduled time.
	if s.p999 < 90*time.Millisecond {
		t.Errorf("slowest latency %v: the held request's wait was not measured", s.p999)
	}
}

func TestLoadStatsSustained(t *testing.T) {
	limit := 10 * time.Millisecond
	for _, tc := range []struct {
		s    loadStats
		want bool
	}{
		{loadStats{sent: 1000, p99: 9 * time.Millisecond}, true},
		{loadStats{sent: 1000, p99: 11 * time.Millisecond}, false},
		{loadStats{sent: 1000, p99: time.Millisecond, errors: 1}, false},
		{loadStats{sent: 0}, false},
	} {
		if got := tc.s.sustained(limit); got != tc.want {
			t.Errorf("%+v: sustained %v, want %v", tc.s, got, tc.want)
		}
	}
}

// --prompt-tokens sends a completions request whose prompt is exactly that
// many token ids, and --json names the fields a script reads.
func TestTokenPromptRequestAndJSONRows(t *testing.T) {
	rq := benchRequest(Config{PromptTokens: 1000, MaxTokens: 4}, true)
	var body struct {
		Model  string   `json:"model"`
		Prompt []uint32 `json:"prompt"`
		Stream bool     `json:"stream"`
	}
	if err := json.Unmarshal(rq.body, &body); err != nil {
		t.Fatal(err)
	}
	if rq.path != "/v1/completions" || len(body.Prompt) != 1000 || !body.Stream || body.Model != model {
		t.Fatalf("path %s, %d ids, stream %v, model %q", rq.path, len(body.Prompt), body.Stream, body.Model)
	}
	cpu, add := 0.1, 12.0
	rows := []Row{{Path: "direct", Targets: 1, Mode: "plain"},
		{Path: "rolter router", Strategy: "round_robin", Targets: 1, Mode: "plain", CPUPer1k: &cpu, AddedP50us: &add,
			CPUPer1kWindows: []float64{cpu}, CPUPer1kTicks: &cpu, IdleCPUmsPerS: &add, IdleShare: &cpu}}
	out, err := json.Marshal(rows)
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"path", "strategy", "targets", "mode", "p50_us", "p99_us", "p99_9_us", "added_p50_us", "max_rate", "cpu_s_per_1k",
		"cpu_s_per_1k_windows", "cpu_s_per_1k_ticks", "idle_cpu_ms_per_s", "idle_cpu_share", "windows_rerun", "disturbed"} {
		if _, ok := got[1][k]; !ok {
			t.Errorf("router row has no %q: %v", k, got[1])
		}
	}
	if _, ok := got[0]["cpu_s_per_1k"]; ok {
		t.Errorf("direct row reports a CPU figure: %v", got[0])
	}
}

func TestAllowedCPUsListsThisProcess(t *testing.T) {
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) == 0 || !slices.IsSorted(cpus) {
		t.Fatalf("CPUs %v", cpus)
	}
}

// The fixed-rate windows go round the paths: each path's windows are
// spread over the whole mode, with the other paths' in between, and each
// measured path gets one CPU figure per window.
func TestWindowsGoRoundThePaths(t *testing.T) {
	var mu sync.Mutex
	var order []string
	serve := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			if len(order) == 0 || order[len(order)-1] != name {
				order = append(order, name)
			}
			mu.Unlock()
			_, _ = io.WriteString(w, "{}")
		}))
	}
	a, b := serve("a"), serve("b")
	defer a.Close()
	defer b.Close()
	self := func() []int { return []int{os.Getpid()} }
	cols := []column{
		{path: "a", base: func(int) string { return a.URL }},
		{path: "b", base: func(int) string { return b.URL }, pid: self},
	}
	// one rate of the max-rate search (the next, 200, is past the limit)
	cfg := Config{Rate: 200, Duration: 50 * time.Millisecond, Windows: 3, SearchStart: 100, SearchMax: 150, SearchFactor: 2,
		SearchDuration: 50 * time.Millisecond, P99Limit: time.Second, PromptWords: 4, MaxTokens: 1}
	cells := measure(t.Context(), cfg, cols, "plain")
	// warm a, warm b, then the rounds a b, b a, a b (each starts one
	// column on), then the search's a b; runs of one path merge: a b a b
	// (b a) (a b) a b.
	if want := []string{"a", "b", "a", "b", "a", "b", "a", "b"}; !slices.Equal(order, want) {
		t.Errorf("requests reached the paths in the runs %v, want %v", order, want)
	}
	if len(cells[0].used()) != 3 || cells[0].used()[0].CPUPer1k != 0 || len(cells[1].used()) != 3 || cells[1].fixed.sent != 30 {
		t.Errorf("direct windows %+v, measured path's %+v over %d requests", cells[0].used(), cells[1].used(), cells[1].fixed.sent)
	}
	for _, w := range cells[1].used() {
		if w.CPUPer1k <= 0 || w.GenCPUPer1k <= 0 || w.ProxyCPUShare == nil {
			t.Errorf("a measured window without its CPU figures: %+v", w)
		}
	}
	for i, c := range cells {
		var r Row
		setSearch(&r, c.search)
		if r.MaxRate != 100 || r.MaxRateFail != nil || len(r.SearchTries) != 1 || !r.SearchTries[0].Used || r.SearchTries[0].Sent != 5 {
			t.Errorf("path %d: max rate %v, failed %v, tries %+v", i, r.MaxRate, r.MaxRateFail, r.SearchTries)
		}
	}
}

// An answer in the wrong mode (JSON to a streamed request, a stream to a
// plain one) is an error, not a fast request.
func TestWrongModeAnswerIsAnError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
	}))
	defer srv.Close()
	base := func(int) string { return srv.URL }
	cfg := Config{PromptWords: 4, MaxTokens: 1}
	if s := openLoop(t.Context(), newGenerator(1), base, benchRequest(cfg, true), 100, 100*time.Millisecond); s.errors != s.sent {
		t.Errorf("JSON answers to streamed requests: %d errors of %d", s.errors, s.sent)
	}
	if s := openLoop(t.Context(), newGenerator(1), base, benchRequest(cfg, false), 100, 100*time.Millisecond); s.errors != 0 {
		t.Errorf("JSON answers to plain requests: %d errors of %d", s.errors, s.sent)
	}
}

// The pacer never wakes before the time asked for, whether under a
// millisecond (which time.Sleep rounds up to one) or over.
func TestPacerWaitsAtLeastItsTime(t *testing.T) {
	p := newPacer()
	defer p.close()
	for _, d := range []time.Duration{50 * time.Microsecond, 300 * time.Microsecond, 2 * time.Millisecond} {
		for range 20 {
			t0 := time.Now()
			p.sleep(d)
			if el := time.Since(t0); el < d {
				t.Fatalf("slept %v of %v", el, d)
			}
		}
	}
}

// The fixed-rate windows' rounds go over the columns in a rotating
// order: over n rounds each column runs once per round and takes each
// place in a round once, so none is always right after direct or always
// first in a round.
func TestRoundsRotateTheColumns(t *testing.T) {
	const n = 4
	place := make([][n]int, n) // place[col][k]: rounds in which col ran k-th
	for r := range n {
		order := rotation(r, n)
		seen := map[int]bool{}
		for k, col := range order {
			seen[col] = true
			place[col][k]++
		}
		if len(seen) != n {
			t.Fatalf("round %d: order %v does not run every column once", r, order)
		}
	}
	for col, ks := range place {
		for k, times := range ks {
			if times != 1 {
				t.Errorf("column %d ran %d-th in %d of %d rounds, want 1", col, k, times, n)
			}
		}
	}
	if got := rotation(5, 4); !slices.Equal(got, []int{1, 2, 3, 0}) {
		t.Errorf("round 5 of 4 columns: %v, want column 1 first", got)
	}
}

// Each rolter row reads its CPU per request over nginx's in the same
// mode and run: the 1-target plain cells of the last quiet run
// (docs/bench/overhead-s7-run1.json) read 1.77 and 1.78, as its table
// says. Without an nginx figure no row has the ratio.
func TestCPUOverNginxOfTheSameRun(t *testing.T) {
	rr, pca, ng := 0.13644976266666667, 0.13764570855555558, 0.07725049433333334
	rows := []Row{{Path: "direct"}, {Path: "rolter router", Strategy: "round_robin", CPUPer1k: &rr},
		{Path: "rolter router", Strategy: "precise_cache_aware", CPUPer1k: &pca}, {Path: "nginx", Strategy: "round_robin", CPUPer1k: &ng}}
	relateToNginx(rows)
	if rows[0].CPUVsNginx != nil || rows[3].CPUVsNginx != nil {
		t.Errorf("direct or nginx with a ratio: %v, %v", rows[0].CPUVsNginx, rows[3].CPUVsNginx)
	}
	for i, want := range map[int]string{1: "1.77", 2: "1.78"} {
		if got := rows[i].CPUVsNginx; got == nil || strconv.FormatFloat(*got, 'f', 2, 64) != want {
			t.Errorf("row %d: %v, want %s", i, got, want)
		}
	}
	alone := []Row{{Path: "rolter router", CPUPer1k: &rr}}
	if relateToNginx(alone); alone[0].CPUVsNginx != nil {
		t.Errorf("no nginx row, ratio %v", *alone[0].CPUVsNginx)
	}
}
