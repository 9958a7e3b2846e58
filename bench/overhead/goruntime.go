package overhead

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// goRuntime is what a Go proxy's runtime says of itself on its admin
// port's /metrics (the Prometheus Go collector): bytes of heap spans in
// use, of heap spans free but kept from the OS (heap idle minus released:
// the GC's headroom that still counts in RSS), of goroutine stacks, the
// heap size the next GC starts at, the live goroutines and the GC cycles
// so far.
type goRuntime struct {
	HeapInuse  float64 `json:"heap_inuse_bytes"`
	HeapKept   float64 `json:"heap_idle_kept_bytes"`
	StackInuse float64 `json:"stack_inuse_bytes"`
	NextGC     float64 `json:"next_gc_bytes"`
	Goroutines float64 `json:"goroutines"`
	GCCycles   float64 `json:"gc_cycles"`
}

// errMetrics is a /metrics answer without the Go runtime's series.
var errMetrics = errors.New("no Go runtime metrics")

// parseGoRuntime reads the Go collector's series from a Prometheus text
// exposition. Every one of them must be there: a breakdown with a part
// missing would put its bytes in "the rest" unnoticed.
func parseGoRuntime(b []byte) (goRuntime, error) {
	want := map[string]float64{}
	names := []string{"go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes",
		"go_memstats_stack_inuse_bytes", "go_memstats_next_gc_bytes", "go_goroutines", "go_gc_duration_seconds_count"}
	for _, n := range names {
		want[n] = -1
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) < 2 || f[0][0] == '#' {
			continue
		}
		name := string(f[0])
		if _, ok := want[name]; !ok {
			continue
		}
		v, err := strconv.ParseFloat(string(f[1]), 64)
		if err != nil {
			return goRuntime{}, fmt.Errorf("%w: %s: %q", errMetrics, name, f[1])
		}
		want[name] = v
	}
	for _, n := range names {
		if want[n] < 0 {
			return goRuntime{}, fmt.Errorf("%w: %s missing", errMetrics, n)
		}
	}
	return goRuntime{
		HeapInuse:  want["go_memstats_heap_inuse_bytes"],
		HeapKept:   want["go_memstats_heap_idle_bytes"] - want["go_memstats_heap_released_bytes"],
		StackInuse: want["go_memstats_stack_inuse_bytes"],
		NextGC:     want["go_memstats_next_gc_bytes"],
		Goroutines: want["go_goroutines"],
		GCCycles:   want["go_gc_duration_seconds_count"],
	}, nil
}

// scrapeGoRuntime reads url (a /metrics endpoint) once.
func scrapeGoRuntime(ctx context.Context, url string) (goRuntime, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return goRuntime{}, err
	}
	// Uncompressed: a compressed answer would keep a compressor in the
	// proxy's heap, which the figures are about.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return goRuntime{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return goRuntime{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return goRuntime{}, fmt.Errorf("%w: %s answered %d", errMetrics, url, resp.StatusCode)
	}
	return parseGoRuntime(b)
}

// memBreakdown is a Go proxy's open-streams memory split up: each part is
// its growth from idle to open over the open streams (KiB, and goroutines,
// per stream). FileKB is the growth of its file pages (RssFile: pages of
// the binary touched for the first time, or mapped around a fault; not
// memory a stream holds). RestKB is the RSS growth the others do not
// explain: the runtime's own structures (span and GC metadata), memory
// outside the Go heap.
type memBreakdown struct {
	HeapKB     float64 `json:"heap_inuse_kb_per_stream"`
	HeapKeptKB float64 `json:"heap_idle_kept_kb_per_stream"`
	StackKB    float64 `json:"stack_inuse_kb_per_stream"`
	Goroutines float64 `json:"goroutines_per_stream"`
	FileKB     float64 `json:"file_pages_kb_per_stream"`
	RestKB     float64 `json:"rest_of_rss_kb_per_stream"`
}

// breakdown splits the RSS growth per stream (rssPerStreamKB, of which
// filePerStreamKB file pages) by the runtime's figures idle and open.
func breakdown(idle, open goRuntime, rssPerStreamKB, filePerStreamKB float64, streams int) memBreakdown {
	per := func(a, b float64) float64 { return (b - a) / 1024 / float64(streams) }
	m := memBreakdown{
		HeapKB:     per(idle.HeapInuse, open.HeapInuse),
		HeapKeptKB: per(idle.HeapKept, open.HeapKept),
		StackKB:    per(idle.StackInuse, open.StackInuse),
		Goroutines: (open.Goroutines - idle.Goroutines) / float64(streams),
		FileKB:     filePerStreamKB,
	}
	m.RestKB = rssPerStreamKB - m.HeapKB - m.HeapKeptKB - m.StackKB - m.FileKB
	return m
}
