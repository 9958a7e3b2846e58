package overhead

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A Prometheus Go collector's exposition, cut to the lines around the
// series read (labels, HELP and TYPE lines, and names that share a
// prefix included).
const goMetrics = `# HELP go_gc_duration_seconds A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0"} 2.1e-05
go_gc_duration_seconds{quantile="1"} 0.000311
go_gc_duration_seconds_sum 0.0123
go_gc_duration_seconds_count 41
# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 2017
go_memstats_heap_idle_bytes 2.4e+07
go_memstats_heap_inuse_bytes 5.1e+07
go_memstats_heap_released_bytes 2e+07
go_memstats_next_gc_bytes 7.3e+07
go_memstats_stack_inuse_bytes 1.6515072e+07
go_memstats_stack_sys_bytes 1.6515072e+07
rolter_requests_total{route="bench-model"} 99
`

func TestParseGoRuntime(t *testing.T) {
	got, err := parseGoRuntime([]byte(goMetrics))
	want := goRuntime{HeapInuse: 51e6, HeapKept: 4e6, StackInuse: 16515072, NextGC: 73e6, Goroutines: 2017, GCCycles: 41}
	if err != nil || got != want {
		t.Fatalf("%+v, %v; want %+v", got, err, want)
	}
	// A series missing is an error: its bytes would land in the rest.
	if _, err := parseGoRuntime([]byte(strings.ReplaceAll(goMetrics, "go_memstats_stack_inuse_bytes", "x"))); err == nil {
		t.Error("no stack series read without error")
	}
}

// The RSS growth per stream splits into the runtime's parts, the file
// pages and the rest.
func TestBreakdownPerStream(t *testing.T) {
	idle := goRuntime{HeapInuse: 4 << 20, HeapKept: 1 << 20, StackInuse: 512 << 10, Goroutines: 17}
	open := goRuntime{HeapInuse: 44 << 20, HeapKept: 11 << 20, StackInuse: 16 << 20, Goroutines: 2017}
	m := breakdown(idle, open, 80, 1.5, 1000)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(m.HeapKB, 40.96) || !near(m.HeapKeptKB, 10.24) || !near(m.StackKB, 15.872) || m.Goroutines != 2 || m.FileKB != 1.5 ||
		!near(m.RestKB, 80-40.96-10.24-15.872-1.5) {
		t.Errorf("%+v", m)
	}
}

// The scrape reads a live /metrics endpoint, and an endpoint without the
// series is an error.
func TestScrapeGoRuntime(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			_, _ = w.Write([]byte(goMetrics))
		}
	}))
	defer srv.Close()
	rt, err := scrapeGoRuntime(t.Context(), srv.URL+"/metrics")
	if err != nil || rt.Goroutines != 2017 {
		t.Fatalf("%+v, %v", rt, err)
	}
	if _, err := scrapeGoRuntime(t.Context(), srv.URL+"/other"); err == nil {
		t.Error("an empty answer read as metrics")
	}
}

// The table marks a cell still disturbed after its reruns and says how
// many windows were rerun; the open-streams table adds the breakdown for
// a row that has one.
func TestTablesShowDisturbanceAndBreakdown(t *testing.T) {
	cpu, steal, fail := 0.15, 80.0, 1033.0
	rows := []Row{
		{Path: "rolter router", Strategy: "round_robin", Targets: 1, Mode: "plain", CPUPer1k: &cpu, StealMsPerS: &steal,
			Rerun: 4, Disturbed: true, MaxRate: 934, MaxRateFail: &fail},
		{Path: "nginx", Strategy: "round_robin", Targets: 1, Mode: "plain", CPUPer1k: &cpu},
	}
	var b strings.Builder
	PrintTable(&b, rows)
	out := b.String()
	if strings.Count(out, "(disturbed)") != 1 || !strings.Contains(out, "1 cell(s) marked disturbed") || !strings.Contains(out, "1033") {
		t.Errorf("cells table:\n%s", out)
	}
	rss := 60.0
	idle, open := goRuntime{HeapInuse: 4 << 20, NextGC: 8 << 20}, goRuntime{HeapInuse: 44 << 20, NextGC: 80 << 20}
	m := breakdown(idle, open, rss, 0, 1000)
	b.Reset()
	PrintTable(&b, []Row{{Path: "rolter router", Strategy: "round_robin", Targets: 1, Mode: "streams", Streams: 1000,
		RSSPerStreamKB: &rss, RuntimeIdle: &idle, RuntimeOpen: &open, PerStream: &m}})
	if out := b.String(); !strings.Contains(out, "heap in use KB") || !strings.Contains(out, "41.0") || !strings.Contains(out, "8.0 → 80.0") {
		t.Errorf("streams table:\n%s", out)
	}
}
