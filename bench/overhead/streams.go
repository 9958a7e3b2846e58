package overhead

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
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
//
// The resident memory of a Go proxy with every stream open moves with
// its collector: the heap grows from the live heap to the next goal,
// and the pages it reached stay resident after the collection. Open
// streams allocate slowly, so one cycle can outlast a run's measured
// part, and a run that ended before the heap first reached its goal read
// less than one that ended after (66-75 MB in three rounds of one run).
// So a run samples the proxy's resident memory and its runtime figures at
// the same instant, and its figure is the median of the samples taken
// after the first collection whose cycle began with every stream open
// (the heap has then been to the goal set with all of them):
// those are the process's steady state. A run whose measured part saw no such
// collection keeps its streams open and samples on, up to another
// StreamDuration; throughput counts the measured part only.

// rssSampleEvery is how often a run reads the proxy's resident memory,
// and a Go proxy's runtime figures with it.
const rssSampleEvery = 500 * time.Millisecond

// streamsRun is one run of one path.
type streamsRun struct {
	stats   loadStats // the streams completed in the measured part
	perSec  float64
	rssKB   float64 // median of the steady samples; 0 for direct
	fileKB  float64 // the RssFile part, median of the same samples
	openAvg float64 // mean open streams at the samples
	cpu     float64 // the proxy's CPU seconds per 1000 streams completed in the measured part
	// A Go proxy's runtime figures, the median of the steady samples'
	// (read with their RSS); nil for others.
	runtime *goRuntime
	// steady and samples count the samples the figures come from and all
	// taken; settled is false when no collection began with every stream
	// open before the sampling ended (the figures are then every
	// sample's).
	steady, samples int
	settled         bool
}

// openShare is the share of the streams open at a sample that counts as
// all of them: a closed-loop client is between two streams for a moment.
const openShare = 0.98

// memSample is one reading of a proxy: its RSS, a Go proxy's runtime
// figures read just before, and the streams open on the client's side.
type memSample struct {
	rssKB, fileKB float64
	rt            *goRuntime
	open          float64
}

// steadySamples are the samples of a Go proxy taken after the first
// collection whose cycle began with every stream open: the first sample
// with all streams open fixes the collection count; the next collection
// sets the heap's goal from the live heap of every stream (the one before
// it may have been set during the ramp), and the one after it shows the
// heap reached that goal, so a sample with a count two higher is steady.
// ok is false when none came after one; samples of a proxy without runtime figures are all steady
// (a Go proxy's sample whose scrape failed is passed over). "Every
// stream" allows for the moment between a client's streams (openShare of
// them is enough).
func steadySamples(ss []memSample, streams int) (steady []memSample, ok bool) {
	if !slices.ContainsFunc(ss, func(m memSample) bool { return m.rt != nil }) {
		return ss, true
	}
	gc := -1.0
	for i, m := range ss {
		if m.rt == nil {
			continue
		}
		if gc < 0 && m.open >= openShare*float64(streams) {
			gc = m.rt.GCCycles
			continue
		}
		if gc >= 0 && m.rt.GCCycles >= gc+2 {
			return ss[i:], true
		}
	}
	return nil, false
}

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
	idle := make([]residentKB, len(cols))
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
			fmt.Fprintf(cfg.Log, "  %d targets streams round %d %-34s %.1f streams/s p50 %v, %.0f open, RSS %.1f MB%s, CPU %.3f s/1k\n",
				n, round+1, c.name(), r.perSec, r.stats.p50.Round(time.Millisecond), r.openAvg, r.rssKB/1024, r.memNote(), r.cpu)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
	}
	var rows []Row
	var directRate float64
	for i, c := range cols {
		var rates, rss, file, cpu []float64
		var all []loadStats
		var rts []goRuntime
		for _, r := range runs[i] {
			rates = append(rates, r.perSec)
			rss, file = append(rss, r.rssKB), append(file, r.fileKB)
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
			row.RSSIdleKB, row.RSSOpenKB = ptr(idle[i].rss), ptr(open)
			row.RSSPerStreamKB = ptr((open - idle[i].rss) / float64(cfg.Streams))
			filePerStream := (median(file) - idle[i].file) / float64(cfg.Streams)
			if idleRT[i] != nil && len(rts) > 0 {
				rt := medianRuntime(rts)
				row.RuntimeIdle, row.RuntimeOpen = idleRT[i], &rt
				row.PerStream = ptr(breakdown(*idleRT[i], rt, *row.RSSPerStreamKB, filePerStream, cfg.Streams))
			}
			if directRate > 0 {
				row.ReqPerSVsDirect = ptr(median(rates) / directRate)
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// memNote says which samples a Go proxy's RSS came from.
func (r streamsRun) memNote() string {
	if r.runtime == nil {
		return ""
	}
	if !r.settled {
		return fmt.Sprintf(" (all %d samples: no collection cycle with every stream open)", r.samples)
	}
	return fmt.Sprintf(" (%d of %d samples, after a collection cycle with every stream open; heap in use %.1f MB, next GC %.1f MB, %.0f collections)",
		r.steady, r.samples, r.runtime.HeapInuse/(1<<20), r.runtime.NextGC/(1<<20), r.runtime.GCCycles)
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
	client.Timeout = streamLength(cfg) + 2*cfg.StreamDuration + 30*time.Second
	tr := client.Transport.(*http.Transport)
	tr.MaxConnsPerHost = 0 // each client holds its own connection
	defer client.CloseIdleConnections()
	rc := cfg
	rc.MaxTokens = cfg.StreamTokens
	rq := benchRequest(rc, true)
	ramp := streamLength(cfg) + time.Second
	start := time.Now()
	from, until := start.Add(ramp), start.Add(ramp+cfg.StreamDuration)
	// stop ends the clients' loops: at until, or later while the proxy's
	// memory has not settled (the sampling below).
	var stop atomic.Bool
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
			for ctx.Err() == nil && !stop.Load() {
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
	var samples []memSample
	var cpu0, cpu1 cpuUse
	sample := func() {
		m := memSample{open: float64(open.Load())}
		if col.metrics != "" {
			if rt, err := scrapeGoRuntime(ctx, col.metrics); err == nil {
				m.rt = &rt
			}
		}
		if col.pid != nil {
			r := rssKB(col.pid)
			m.rssKB, m.fileKB = r.rss, r.file
		}
		samples = append(samples, m)
	}
	if sleepCtx(ctx, time.Until(from)) {
		cpu0 = readCPU(col.pid)
		sample()
		t := time.NewTicker(rssSampleEvery)
		for now := range t.C {
			if ctx.Err() != nil {
				break
			}
			if now.After(until) {
				if cpu1 == (cpuUse{}) {
					cpu1 = readCPU(col.pid)
				}
				if _, ok := steadySamples(samples, cfg.Streams); ok || col.pid == nil || now.After(until.Add(cfg.StreamDuration)) {
					break
				}
			}
			sample()
		}
		t.Stop()
		if cpu1 == (cpuUse{}) {
			cpu1 = readCPU(col.pid)
		}
	}
	stop.Store(true)
	wg.Wait()
	done.summarise()
	r := streamsRun{stats: done, perSec: float64(done.sent-done.errors) / cfg.StreamDuration.Seconds(), samples: len(samples)}
	steady, ok := steadySamples(samples, cfg.Streams)
	if !ok {
		steady = samples
	}
	r.settled, r.steady = ok, len(steady)
	var rss, file []float64
	var rts []goRuntime
	for _, m := range steady {
		rss, file = append(rss, m.rssKB), append(file, m.fileKB)
		if m.rt != nil {
			rts = append(rts, *m.rt)
		}
	}
	r.rssKB, r.fileKB = median(rss), median(file)
	if len(rts) > 0 {
		r.runtime = ptr(medianRuntime(rts))
	}
	if done.sent > 0 {
		r.cpu = cpu1.sub(cpu0).Exact.Seconds() * 1000 / float64(done.sent)
	}
	for _, m := range samples {
		r.openAvg += m.open / float64(len(samples))
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

// residentKB is a proxy's resident memory in KiB: VmRSS, and the part of
// it that is file pages (RssFile: the binary's pages it touched, which
// the page cache's state moves by several MB between runs).
type residentKB struct{ rss, file float64 }

// rssKB sums VmRSS and RssFile of the processes pids returns.
func rssKB(pids func() []int) residentKB {
	var total residentKB
	if pids == nil {
		return total
	}
	for _, pid := range pids() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		total.rss += vmRSS(string(b))
		total.file += statusField(b, "RssFile")
	}
	return total
}

// vmRSS reads the VmRSS line (kB) of a /proc/<pid>/status text.
func vmRSS(status string) float64 { return statusField([]byte(status), "VmRSS") }
