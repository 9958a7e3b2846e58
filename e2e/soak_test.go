//go:build soak

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

// soakDuration is ROLTER_SOAK_DURATION (a Go duration), 10 minutes by
// default.
func soakDuration(t *testing.T) time.Duration {
	v := os.Getenv("ROLTER_SOAK_DURATION")
	if v == "" {
		return 10 * time.Minute
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 30*time.Second {
		t.Fatalf("ROLTER_SOAK_DURATION %q: want a duration of at least 30s", v)
	}
	return d
}

// buildRaceRolter builds cmd/rolter with -race when cgo is available (the
// race detector needs it), else without.
func buildRaceRolter(t *testing.T) (Binary, bool) {
	out, err := exec.Command("go", "env", "CGO_ENABLED", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(out))
	if len(f) < 2 || f[0] != "1" {
		return BuildRolter(t), false
	}
	bin := filepath.Join(t.TempDir(), "rolter-race")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-race", "-o", bin, "./cmd/rolter")
	cmd.Dir = filepath.Dir(f[1])
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -race ./cmd/rolter: %v\n%s", err, b)
	}
	return Binary{Path: bin}, true
}

// heapInuse reads go_memstats_heap_inuse_bytes from a /metrics URL.
func heapInuse(ctx context.Context, url string) (float64, error) {
	return gauge(ctx, url, "go_memstats_heap_inuse_bytes")
}

// gauge reads the unlabelled series name from a /metrics URL.
func gauge(ctx context.Context, url, name string) (float64, error) {
	code, b, err := Do(ctx, http.MethodGet, url, "", "")
	if err != nil || code != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %d %v", url, code, err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s has no %s", url, name)
}

// floor is the smallest sample: heap in use saw-tooths between the live
// heap and the GC target, so the low points of a window track the live
// heap while its median mostly tracks where the GC cycle happened to be.
func floor(xs []float64) float64 { return slices.Min(xs) }

// TestSoak is scenario 12: ROLTER_SOAK_DURATION (10 min by default) of
// moderate load — 20 non-streaming requests/s and a stream every 250 ms,
// half of them dropped by the client after the first token — against a
// `rolter router --standalone` process built with -race (when cgo is
// available) and a plain one, both in front of 2
// `rolter sim` engines behind taps. It checks that every dropped client's
// upstream request is cancelled within 1 s (at the taps), that the router
// process's heap is flat within 10% (go_memstats_heap_inuse_bytes, the
// low point of the second quarter against the low point of the last
// quarter: the first quarter is warm-up), that the
// race-built router logged no data race, and that both routers' goroutines
// (go_goroutines) come back to their idle count once the load stopped.
func TestSoak(t *testing.T) {
	dur := soakDuration(t)
	soak(t, dur)
}

func soak(t *testing.T, dur time.Duration) {
	bin, race := buildRaceRolter(t)
	plain := BuildRolter(t)
	dir := t.TempDir()
	var engines []*Engine
	for i := range 2 {
		name := fmt.Sprintf("e%d", i)
		url, proc := StartSimArgs(t, plain, "sim-"+name, dir, "--speed", "1")
		engines = append(engines, &Engine{Name: name, URL: url, Tap: StartTap(t, url), Proc: proc})
	}
	toml := FleetTOML(engines, "")
	cfgPath := filepath.Join(dir, "rolter.toml")
	if err := os.WriteFile(cfgPath, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := FreeAddrs(t, 2)
	proc := Start(t, bin, "router", dir, "router", "--standalone", "--config", cfgPath, "--http", addrs[0], "--admin", addrs[1])
	ext := "http://" + addrs[0]
	metrics := "http://" + addrs[1] + "/metrics"
	if err := testwait.Poll(30*time.Second, 50*time.Millisecond, func() error {
		_, err := heapInuse(context.Background(), metrics)
		return err
	}); err != nil {
		t.Fatalf("router: %v\n%s", err, proc.Tail(2000))
	}
	plainRouter := StartStandalone(t, plain, dir, "router-plain", toml)
	apis := []string{ext, plainRouter.API}
	routerMetrics := []string{metrics, plainRouter.Admin + "/metrics"}
	idle := make([]float64, len(routerMetrics))
	for i, m := range routerMetrics {
		v, err := gauge(context.Background(), m, "go_goroutines")
		if err != nil {
			t.Fatal(err)
		}
		idle[i] = v
	}

	ctx, cancel := context.WithTimeout(context.Background(), dur+2*time.Minute)
	defer cancel()
	loadCtx, stopLoad := context.WithTimeout(ctx, dur)
	defer stopLoad()
	var wg sync.WaitGroup
	loadRes := make(chan LoadResult, 1)
	wg.Add(1)
	go func() { defer wg.Done(); loadRes <- RateLoad("chat", 20)(loadCtx, apis) }()

	var mu sync.Mutex
	var delays []time.Duration
	var streamProblems []string
	streams := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for i := 0; loadCtx.Err() == nil; i++ {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
			api := apis[i%len(apis)]
			if i%2 == 0 {
				d, err := DisconnectCancels(ctx, api, engines, 1, 2000)
				mu.Lock()
				streams++
				delays = append(delays, d...)
				if err != nil && len(streamProblems) < 5 {
					streamProblems = append(streamProblems, err.Error())
				}
				mu.Unlock()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, done := StartStream(ctx, api, "", "chat", fmt.Sprintf("soak-%d", i), 64)
				<-done
				mu.Lock()
				defer mu.Unlock()
				streams++
				if (!s.Done || s.ErrorEv || s.Tokens != 64) && len(streamProblems) < 5 {
					streamProblems = append(streamProblems, fmt.Sprintf("stream %d: status %d, [DONE] %v, error event %v, %d tokens",
						i, s.Status, s.Done, s.ErrorEv, s.Tokens))
				}
			}()
		}
	}()

	var heap []float64
	start := time.Now()
	sample := time.NewTicker(max(dur/120, time.Second))
	defer sample.Stop()
sampling:
	for {
		select {
		case <-loadCtx.Done():
			break sampling
		case <-sample.C:
		}
		if v, err := heapInuse(ctx, metrics); err == nil {
			heap = append(heap, v)
		}
	}
	wg.Wait()
	load := <-loadRes
	elapsed := time.Since(start)

	q := len(heap) / 4
	if q < 2 {
		t.Fatalf("only %d heap samples", len(heap))
	}
	early, late := floor(heap[q:2*q]), floor(heap[3*q:])
	growth := (late - early) / early
	slices.Sort(delays)
	worst := time.Duration(0)
	if len(delays) > 0 {
		worst = delays[len(delays)-1]
	}
	t.Logf("soak %v (race-built router process: %v): %d non-streaming requests, %d failed %v; %d streams (%d dropped by the client); "+
		"upstream cancel after a client drop: p50 %v, max %v; router heap in use (window low points) %.2f MiB → %.2f MiB (%+.1f%%) over %d samples, overall max %.2f MiB",
		elapsed.Round(time.Second), race, load.Requests, load.Failed, load.FirstErrors, streams, len(delays),
		Percentile(delays, 0.5), worst, early/(1<<20), late/(1<<20), 100*growth, len(heap), slices.Max(heap)/(1<<20))
	for _, p := range streamProblems {
		t.Error(p)
	}
	if load.Requests == 0 || float64(load.Failed) > 0.001*float64(load.Requests) {
		t.Errorf("%d of %d requests failed", load.Failed, load.Requests)
	}
	if worst > time.Second {
		t.Errorf("an upstream request was cancelled %v after its client left", worst)
	}
	if growth > 0.10 {
		t.Errorf("router heap grew %.1f%% (%.0f → %.0f bytes)", 100*growth, early, late)
	}
	// Idle keep-alive connections are not leaks: close the client's, then
	// wait for each router's goroutines to come back near their idle count
	// (a few for connections the router still holds open).
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	for i, m := range routerMetrics {
		var now float64
		err := testwait.Poll(30*time.Second, 100*time.Millisecond, func() error {
			v, err := gauge(ctx, m, "go_goroutines")
			if err != nil {
				return err
			}
			if now = v; now > idle[i]+8 {
				return fmt.Errorf("%v goroutines, %v before the load", now, idle[i])
			}
			return nil
		})
		if err != nil {
			t.Errorf("router %d leaks goroutines: %v", i, err)
		}
	}
	if b, err := os.ReadFile(proc.Log); err == nil && strings.Contains(string(b), "DATA RACE") {
		t.Errorf("the router process reported a data race:\n%s", proc.Tail(4000))
	}
}
