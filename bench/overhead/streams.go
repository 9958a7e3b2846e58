package overhead

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// The open-streams mode (Config.Streams > 0): Streams closed-loop
// clients each keep one streamed request open at a time; the canned
// engine paces its token events StreamGap apart, so a stream stays open
// about StreamTokens × StreamGap. Every proxy is started once; then
// direct and each proxy run in turn, StreamRounds times, so a drift of
// the shared machine falls on every path alike. Reported per path: the
// completed streams per second (median and every run), its ratio to
// direct's median, and the proxy's resident memory before the first run
// and while every stream is open, per open stream.

// rssSampleEvery is how often a run reads the proxy's resident memory.
const rssSampleEvery = 250 * time.Millisecond

// streamsRun is one run of one path.
type streamsRun struct {
	stats   loadStats // the streams completed in the measured part
	perSec  float64
	rssKB   float64 // median of the samples; 0 for direct
	openAvg float64 // mean open streams at the samples
	cpu     float64 // the proxy's CPU seconds per 1000 streams completed in the measured part
	// A Go proxy's runtime figures, the median of the reads while the
	// streams were open; nil for others.
	runtime *goRuntime
}

// runtimeEvery is how many RSS samples apart a run reads a Go proxy's
// /metrics: every 2 s, few enough that the scrapes' own work stays small
// beside the streams'.
const runtimeEvery = 8

func runStreams(ctx context.Context, cfg Config, n int) ([]Row, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addrs, err := startEngine(ctx, cfg, n)
	if err != nil {
		return nil, err
	}
	cols, err := startColumns(ctx, cfg, addrs)
	defer stopColumns(cols)
	if err != nil {
		return nil, err
	}
	idle := make([]float64, len(cols))
	if !sleepCtx(ctx, idleSettle) {
		return nil, ctx.Err()
	}
	idleRT := make([]*goRuntime, len(cols))
	for i, c := range cols {
		idle[i] = rssKB(c.pid)
		if c.metrics != "" {
			rt, err := scrapeGoRuntime(ctx, c.metrics)
			if err != nil {
				return nil, fmt.Errorf("bench overhead: %s's runtime figures: %w", c.name(), err)
			}
			idleRT[i] = &rt
		}
	}
	runs := make([][]streamsRun, len(cols))
	for round := range cfg.StreamRounds {
		for i, c := range cols {
			r := streamsOnce(ctx, cfg, c)
			runs[i] = append(runs[i], r)
			fmt.Fprintf(cfg.Log, "  %d targets streams round %d %-34s %.1f streams/s p50 %v, %.0f open, RSS %.1f MB, CPU %.3f s/1k\n",
				n, round+1, c.name(), r.perSec, r.stats.p50.Round(time.Millisecond), r.openAvg, r.rssKB/1024, r.cpu)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
	}
	var rows []Row
	var directRate float64
	for i, c := range cols {
		var rates, rss, cpu []float64
		var all []loadStats
		var rts []goRuntime
		for _, r := range runs[i] {
			rates = append(rates, r.perSec)
			rss = append(rss, r.rssKB)
			cpu = append(cpu, r.cpu)
			all = append(all, r.stats)
			if r.runtime != nil {
				rts = append(rts, *r.runtime)
			}
		}
		st := pool(all)
		row := Row{Path: c.path, Strategy: c.strategy, Targets: n, Mode: "streams", Engine: cfg.Engine,
			Pinned: cfg.Pin && c.pid != nil, Streams: cfg.Streams, Sent: st.sent, Errors: st.errors,
			P50us: us(st.p50), P99us: us(st.p99), P999us: us(st.p999),
			ReqPerS: ptr(median(rates)), ReqPerSRuns: rates}
		if c.pid == nil {
			directRate = median(rates)
		} else {
			open := median(rss)
			row.CPUPer1k, row.CPUPer1kWindows, row.Windows = ptr(median(cpu)), cpu, len(cpu)
			row.RSSIdleKB, row.RSSOpenKB = ptr(idle[i]), ptr(open)
			row.RSSPerStreamKB = ptr((open - idle[i]) / float64(cfg.Streams))
			if idleRT[i] != nil && len(rts) > 0 {
				rt := medianRuntime(rts)
				row.RuntimeIdle, row.RuntimeOpen = idleRT[i], &rt
				row.PerStream = ptr(breakdown(*idleRT[i], rt, *row.RSSPerStreamKB, cfg.Streams))
			}
			if directRate > 0 {
				row.ReqPerSVsDirect = ptr(median(rates) / directRate)
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// streamLength is how long one stream stays open on the canned engine.
func streamLength(cfg Config) time.Duration {
	return time.Duration(cfg.StreamTokens) * cfg.StreamGap
}

// streamsOnce runs cfg.Streams closed-loop streaming clients against
// col: their starts spread over one stream length, then StreamDuration
// measured, then no new request and the open ones finish.
func streamsOnce(ctx context.Context, cfg Config, col column) streamsRun {
	client := newClient()
	client.Timeout = streamLength(cfg) + 30*time.Second
	tr := client.Transport.(*http.Transport)
	tr.MaxConnsPerHost = 0 // each client holds its own connection
	defer client.CloseIdleConnections()
	rc := cfg
	rc.MaxTokens = cfg.StreamTokens
	rq := benchRequest(rc, true)
	ramp := streamLength(cfg) + time.Second
	start := time.Now()
	from, until := start.Add(ramp), start.Add(ramp+cfg.StreamDuration)
	var open atomic.Int64
	var mu sync.Mutex
	var done loadStats
	var wg sync.WaitGroup
	for i := range cfg.Streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !sleepCtx(ctx, time.Duration(i)*streamLength(cfg)/time.Duration(cfg.Streams)) {
				return
			}
			for ctx.Err() == nil && time.Now().Before(until) {
				at := time.Now()
				open.Add(1)
				lat, failed := sendStream(ctx, client, col.base(i), rq, at)
				open.Add(-1)
				end := at.Add(lat)
				if failed {
					end = time.Now()
				}
				if end.Before(from) || end.After(until) {
					continue
				}
				mu.Lock()
				done.sent++
				if failed {
					done.errors++
				} else {
					done.lat = append(done.lat, lat)
				}
				mu.Unlock()
			}
		}()
	}
	var rss, opens []float64
	var rts []goRuntime
	var cpu0, cpu1 cpuUse
	if sleepCtx(ctx, time.Until(from)) {
		cpu0 = readCPU(col.pid)
		t := time.NewTicker(rssSampleEvery)
		for now := range t.C {
			if ctx.Err() != nil || now.After(until) {
				break
			}
			if col.pid != nil {
				rss = append(rss, rssKB(col.pid))
			}
			opens = append(opens, float64(open.Load()))
			if col.metrics != "" && len(opens)%runtimeEvery == runtimeEvery/2 {
				if rt, err := scrapeGoRuntime(ctx, col.metrics); err == nil {
					rts = append(rts, rt)
				}
			}
		}
		t.Stop()
		cpu1 = readCPU(col.pid)
	}
	wg.Wait()
	done.summarise()
	r := streamsRun{stats: done, perSec: float64(done.sent-done.errors) / cfg.StreamDuration.Seconds(), rssKB: median(rss)}
	if len(rts) > 0 {
		r.runtime = ptr(medianRuntime(rts))
	}
	if done.sent > 0 {
		r.cpu = cpu1.sub(cpu0).Exact.Seconds() * 1000 / float64(done.sent)
	}
	for _, o := range opens {
		r.openAvg += o / float64(len(opens))
	}
	return r
}

// medianRuntime is the field-by-field median of rts.
func medianRuntime(rts []goRuntime) goRuntime {
	field := func(get func(goRuntime) float64) float64 {
		vs := make([]float64, len(rts))
		for i, rt := range rts {
			vs[i] = get(rt)
		}
		return median(vs)
	}
	return goRuntime{
		HeapInuse:  field(func(r goRuntime) float64 { return r.HeapInuse }),
		HeapKept:   field(func(r goRuntime) float64 { return r.HeapKept }),
		StackInuse: field(func(r goRuntime) float64 { return r.StackInuse }),
		NextGC:     field(func(r goRuntime) float64 { return r.NextGC }),
		Goroutines: field(func(r goRuntime) float64 { return r.Goroutines }),
		GCCycles:   field(func(r goRuntime) float64 { return r.GCCycles }),
	}
}

// rssKB sums VmRSS of the processes pids returns, in KiB.
func rssKB(pids func() []int) float64 {
	if pids == nil {
		return 0
	}
	var total float64
	for _, pid := range pids() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		total += vmRSS(string(b))
	}
	return total
}

// vmRSS reads the VmRSS line (kB) of a /proc/<pid>/status text.
func vmRSS(status string) float64 { return statusField([]byte(status), "VmRSS") }
