// Package overhead owns `rolter bench overhead`: what a proxy adds to a
// request on its way to an engine. One engine in this process serves the
// OpenAI API on one or more loopback ports: by default the instant-mode
// sim's answers to the benchmark's request, recorded once and replayed
// without decoding the request (engine.go), or the sim itself. An
// open-loop generator sends the same requests to it directly, through
// `rolter router` and through nginx, each started as a subprocess with a
// generated config. It reports latency percentiles at a fixed rate over
// several windows that go round the paths, the latency the proxy adds over
// direct, the highest rate sustained under a p99 limit, the proxy
// processes' CPU seconds per 1000 requests (nanoseconds from the kernel's
// per-process CPU clock, the median of the windows, cpu.go) and their CPU
// with no request in flight. Its open-streams mode (streams.go) measures
// resident memory per open stream and streaming throughput against
// direct.
//
// With Config.Pin the proxy under test runs on one CPU and the generator
// and the engine (this process) on the others (taskset), so the CPU figure
// is the proxy's own and neighbours on a shared machine disturb it less.
package overhead

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Config is one benchmark run.
type Config struct {
	Rate     float64       // fixed rate (requests/s) of the latency measurement
	Duration time.Duration // length of one fixed-rate window
	// Windows is the number of fixed-rate windows per cell: CPU per
	// request is their median, latency percentiles are over every
	// request of them.
	Windows int
	// Idle is how long each proxy's CPU is read with no request in
	// flight, after it answered its first and a second's settling; 0
	// skips it.
	Idle time.Duration
	// The max-rate search: SearchStart × SearchFactor^k up to SearchMax,
	// SearchDuration each, while p99 < P99Limit and errors < 0.1 %.
	SearchStart, SearchFactor, SearchMax float64
	SearchDuration, P99Limit             time.Duration
	Targets                              []int    // ports of the one engine, per run
	Strategies                           []string // router strategies, one column each
	Modes                                []string // "plain" and/or "stream"
	// PromptWords is the user message's length of the default chat
	// request; PromptTokens > 0 sends /v1/completions requests whose
	// prompt is that many token ids instead.
	PromptWords, PromptTokens, MaxTokens int
	Engine                               string // EngineCanned or EngineSim
	// Streams > 0 runs the open-streams mode instead of the fixed-rate
	// cells (streams.go): that many clients each keep one streamed
	// request of StreamTokens tokens, StreamGap apart, open at a time,
	// for StreamDuration per run, direct and through each proxy in turn,
	// StreamRounds times.
	Streams, StreamTokens, StreamRounds int
	StreamGap, StreamDuration           time.Duration
	Nginx                               string // nginx binary; "" skips the column
	RouterBin                           string // rolter binary run as `rolter router`; "" skips the column
	WorkDir                             string // generated configs and logs
	// Pin runs each proxy on CPU ProxyCPU and this process (generator and
	// engine) on the CPUs it may use apart from that one (needs taskset
	// and at least two usable CPUs).
	Pin      bool
	ProxyCPU int
	Log      io.Writer // progress lines; nil: none
}

// Row is one measured (targets, mode, path) combination.
type Row struct {
	Path         string  `json:"path"`     // "direct", "rolter router" or "nginx"
	Strategy     string  `json:"strategy"` // the router's strategy, "round_robin" for nginx, "" direct
	Targets      int     `json:"targets"`
	Mode         string  `json:"mode"`                    // plain, stream or streams (the open-streams mode)
	PromptTokens int     `json:"prompt_tokens,omitempty"` // 0: the chat request
	Engine       string  `json:"engine,omitempty"`
	Pinned       bool    `json:"pinned"`
	Sent         int     `json:"sent"`
	Errors       int     `json:"errors"`
	P50us        float64 `json:"p50_us"`
	P99us        float64 `json:"p99_us"`
	P999us       float64 `json:"p99_9_us"`
	// Added latency over direct at the same rate and mode; nil for direct
	// (or when direct was not measured).
	AddedP50us  *float64 `json:"added_p50_us,omitempty"`
	AddedP99us  *float64 `json:"added_p99_us,omitempty"`
	AddedP999us *float64 `json:"added_p99_9_us,omitempty"`
	MaxRate     float64  `json:"max_rate"`
	// CPU seconds of the proxy's processes per 1000 requests: all the CPU
	// they used in a fixed-rate window (background work included) over
	// the window's requests, the median of the windows; nil for direct.
	CPUPer1k *float64 `json:"cpu_s_per_1k,omitempty"`
	Windows  int      `json:"windows,omitempty"`
	// Each window's figure, and the median of the same from
	// /proc/<pid>/stat clock ticks (the cross-check).
	CPUPer1kWindows []float64 `json:"cpu_s_per_1k_windows,omitempty"`
	CPUPer1kTicks   *float64  `json:"cpu_s_per_1k_ticks,omitempty"`
	// The proxy's CPU with no request in flight, in ms per second, and
	// that rate over a window's length as a share of the window's CPU:
	// how much of CPUPer1k is background work.
	IdleCPUmsPerS *float64 `json:"idle_cpu_ms_per_s,omitempty"`
	IdleShare     *float64 `json:"idle_cpu_share,omitempty"`
	// The proxy's threads' time runnable but not running, ms per second of
	// window (median of the windows): near 0 when the proxy had its CPU to
	// itself; more means other processes took it, and the CPU figure is
	// from a disturbed machine.
	RunqWaitMsPerS *float64 `json:"runq_wait_ms_per_s,omitempty"`

	// The open-streams mode (streams.go).
	Streams         int       `json:"streams,omitempty"`
	ReqPerS         *float64  `json:"req_per_s,omitempty"`      // median over the runs
	ReqPerSRuns     []float64 `json:"req_per_s_runs,omitempty"` // each run, in order
	ReqPerSVsDirect *float64  `json:"req_per_s_vs_direct,omitempty"`
	RSSIdleKB       *float64  `json:"rss_idle_kb,omitempty"` // before the first run
	RSSOpenKB       *float64  `json:"rss_open_kb,omitempty"` // median of the runs' medians while every stream is open
	RSSPerStreamKB  *float64  `json:"rss_kb_per_stream,omitempty"`
}

// ErrConfig is returned for a Config that cannot run.
var ErrConfig = errors.New("bench overhead")

// Run measures every column for every target count and returns the rows
// measured so far, also when it fails midway.
func Run(ctx context.Context, cfg Config) ([]Row, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	raiseFileLimit()
	if cfg.Pin {
		restore, err := pinSelf(cfg.ProxyCPU)
		if err != nil {
			return nil, err
		}
		defer restore()
	}
	var rows []Row
	for _, n := range cfg.Targets {
		var got []Row
		var err error
		if cfg.Streams > 0 {
			got, err = runStreams(ctx, cfg, n)
		} else {
			got, err = runTargets(ctx, cfg, n)
		}
		rows = append(rows, got...)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

func (c *Config) check() error {
	if c.Rate <= 0 || c.SearchStart <= 0 || c.SearchFactor <= 1 || c.Duration <= 0 || c.SearchDuration <= 0 || c.Windows < 1 || c.Idle < 0 {
		return fmt.Errorf("%w: rates, durations and windows must be positive, the search factor > 1", ErrConfig)
	}
	if c.Engine != EngineCanned && c.Engine != EngineSim {
		return fmt.Errorf("%w: engines are %s and %s, not %q", ErrConfig, EngineCanned, EngineSim, c.Engine)
	}
	if c.Streams > 0 && (c.Engine != EngineCanned || c.StreamTokens < 1 || c.StreamRounds < 1 || c.StreamDuration <= 0 || c.StreamGap <= 0) {
		return fmt.Errorf("%w: the open-streams mode needs the %s engine, tokens, rounds, a duration and a gap between events", ErrConfig, EngineCanned)
	}
	for _, m := range c.Modes {
		if m != "plain" && m != "stream" {
			return fmt.Errorf("%w: modes are plain and stream, not %q", ErrConfig, m)
		}
	}
	if len(c.Targets) == 0 || len(c.Modes) == 0 {
		return fmt.Errorf("%w: no target counts or no modes", ErrConfig)
	}
	if c.PromptTokens < 0 || c.PromptWords < 0 || c.MaxTokens < 1 {
		return fmt.Errorf("%w: prompt sizes must be ≥ 0 and max tokens ≥ 1", ErrConfig)
	}
	if c.WorkDir == "" {
		return fmt.Errorf("%w: no work directory", ErrConfig)
	}
	return nil
}

// runTargets measures every column against one engine on n ports. Every
// column's proxy is started first and stays up (idle) while the others
// are measured; each mode's fixed-rate windows go round the columns in
// turn, so a change in what the machine's neighbours do lands on every
// path's median alike, not on one path's whole cell.
func runTargets(ctx context.Context, cfg Config, n int) ([]Row, error) {
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
	idle := idleCPU(ctx, cols, cfg.Idle)
	for i, c := range cols {
		if idle[i] != nil {
			fmt.Fprintf(cfg.Log, "  %d targets idle   %-34s %.3f ms CPU/s\n", n, c.name(), *idle[i])
		}
	}
	var rows []Row
	for _, mode := range cfg.Modes {
		cells := measure(ctx, cfg, cols, mode)
		if err := ctx.Err(); err != nil {
			return rows, err
		}
		d := cells[0].fixed // direct is the first column
		for i, col := range cols {
			c, st := cells[i], cells[i].fixed
			r := Row{Path: col.path, Strategy: col.strategy, Targets: n, Mode: mode, PromptTokens: cfg.PromptTokens,
				Engine: cfg.Engine, Pinned: cfg.Pin && col.pid != nil, Sent: st.sent, Errors: st.errors,
				P50us: us(st.p50), P99us: us(st.p99), P999us: us(st.p999), MaxRate: c.maxRate, Windows: cfg.Windows}
			if col.pid != nil {
				r.CPUPer1k, r.CPUPer1kTicks, r.CPUPer1kWindows = ptr(median(c.cpu)), ptr(median(c.ticks)), c.cpu
				r.RunqWaitMsPerS = ptr(median(c.wait))
				r.AddedP50us, r.AddedP99us, r.AddedP999us = ptr(us(st.p50-d.p50)), ptr(us(st.p99-d.p99)), ptr(us(st.p999-d.p999))
				if idle[i] != nil && *r.CPUPer1k > 0 {
					// idle ms in a window's length ÷ the window's CPU in ms
					// (s per 1000 requests × requests = ms)
					r.IdleCPUmsPerS = idle[i]
					r.IdleShare = ptr(*idle[i] * cfg.Duration.Seconds() / (*r.CPUPer1k * float64(st.sent) / float64(cfg.Windows)))
				}
			}
			fmt.Fprintf(cfg.Log, "  %d targets %-6s %-34s p50 %v p99 %v max %.0f/s%s\n", n, mode, col.name(),
				st.p50.Round(time.Microsecond), st.p99.Round(time.Microsecond), c.maxRate, cpuNote(c.cpu, c.wait))
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// startColumns starts every column's proxy; on an error the ones
// started are returned with it, for stopColumns.
func startColumns(ctx context.Context, cfg Config, addrs []string) ([]column, error) {
	var cols []column
	for _, mk := range columns(ctx, cfg, addrs) {
		c, err := mk()
		if err != nil {
			return cols, err
		}
		cols = append(cols, c)
	}
	return cols, nil
}

func stopColumns(cols []column) {
	for _, c := range cols {
		if c.stop != nil {
			c.stop()
		}
	}
}

// columns lists the paths to measure, direct first, each started when
// called.
func columns(ctx context.Context, cfg Config, addrs []string) []func() (column, error) {
	cols := []func() (column, error){func() (column, error) { return directColumn(addrs), nil }}
	if cfg.RouterBin != "" {
		for _, s := range cfg.Strategies {
			cols = append(cols, func() (column, error) { return routerColumn(ctx, cfg, s, addrs) })
		}
	}
	if cfg.Nginx != "" {
		cols = append(cols, func() (column, error) { return nginxColumn(ctx, cfg, addrs) })
	}
	return cols
}

func cpuNote(cpu, wait []float64) string {
	if len(cpu) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(" CPU s/1k")
	for _, v := range cpu {
		fmt.Fprintf(&b, " %.4f", v)
	}
	b.WriteString("; run-queue wait ms/s")
	for _, v := range wait {
		fmt.Fprintf(&b, " %.0f", v)
	}
	return b.String()
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ptr(v float64) *float64 { return &v }

// idleSettle is how long proxies that have just answered their first
// request are left before their idle CPU is read.
const idleSettle = time.Second

// idleCPU is the CPU each column's proxy uses with no request in flight,
// in milliseconds per second, read over the same dur for all of them
// after idleSettle; nil for direct, and for all when dur is 0.
func idleCPU(ctx context.Context, cols []column, dur time.Duration) []*float64 {
	out := make([]*float64, len(cols))
	if dur <= 0 || !sleepCtx(ctx, idleSettle) {
		return out
	}
	before, t0 := make([]cpuUse, len(cols)), time.Now()
	for i, c := range cols {
		before[i] = readCPU(c.pid)
	}
	if !sleepCtx(ctx, dur) {
		return out
	}
	el := time.Since(t0)
	for i, c := range cols {
		if c.pid != nil {
			out[i] = ptr(float64(readCPU(c.pid).sub(before[i]).Exact) / float64(time.Millisecond) / el.Seconds())
		}
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// cell is one (column, mode) measured: the pooled fixed-rate windows,
// each window's proxy CPU seconds per 1000 requests (exact and from
// clock ticks) and its threads' run-queue wait in ms per second, and the
// max-rate search's result.
type cell struct {
	fixed            loadStats
	cpu, ticks, wait []float64
	maxRate          float64
}

// measure runs one mode's fixed-rate windows, round the columns
// Windows times, then each column's max-rate search.
func measure(ctx context.Context, cfg Config, cols []column, mode string) []cell {
	rq := benchRequest(cfg, mode == "stream")
	clients := make([]*http.Client, len(cols))
	for i, col := range cols {
		clients[i] = newClient()
		defer clients[i].CloseIdleConnections()
		// Warm connections and caches at a modest rate.
		openLoop(ctx, clients[i], col.base, rq, min(cfg.Rate, 500), 500*time.Millisecond)
	}
	cells := make([]cell, len(cols))
	runs := make([][]loadStats, len(cols))
	for range cfg.Windows {
		for i, col := range cols {
			before, t0 := readCPU(col.pid), time.Now()
			st := openLoop(ctx, clients[i], col.base, rq, cfg.Rate, cfg.Duration)
			used, el := readCPU(col.pid).sub(before), time.Since(t0)
			runs[i] = append(runs[i], st)
			if col.pid != nil && st.sent > 0 {
				cells[i].cpu = append(cells[i].cpu, used.Exact.Seconds()*1000/float64(st.sent))
				cells[i].ticks = append(cells[i].ticks, used.Ticks.Seconds()*1000/float64(st.sent))
				cells[i].wait = append(cells[i].wait, float64(used.Wait)/float64(time.Millisecond)/el.Seconds())
			}
		}
	}
	for i, col := range cols {
		cells[i].fixed = pool(runs[i])
		// A step that fails is run once more before the search stops, so
		// one burst of noise from a neighbour does not end it.
		for rate := cfg.SearchStart; rate <= cfg.SearchMax && ctx.Err() == nil; rate *= cfg.SearchFactor {
			ok := false
			for try := 0; try < 2 && !ok; try++ {
				ok = openLoop(ctx, clients[i], col.base, rq, rate, cfg.SearchDuration).sustained(cfg.P99Limit)
			}
			if !ok {
				break
			}
			cells[i].maxRate = rate
		}
	}
	return cells
}

// PrintTable writes rows as an aligned table (the open-streams rows as
// their own).
func PrintTable(w io.Writer, rows []Row) {
	var cells, streams []Row
	for _, r := range rows {
		if r.Mode == "streams" {
			streams = append(streams, r)
		} else {
			cells = append(cells, r)
		}
	}
	if len(cells) > 0 {
		printCells(w, cells)
	}
	if len(streams) > 0 {
		printStreams(w, streams)
	}
}

func printStreams(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "targets\tstreams\tpath\tstreams/s (median)\truns\t÷ direct\tp50 ms\tp99 ms\terrors\tRSS idle MB\tRSS open MB\tKB per stream\tCPU s/1k streams\t")
	opt := func(v *float64, scale float64, prec int) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatFloat(*v*scale, 'f', prec, 64)
	}
	for _, r := range rows {
		runs := make([]string, len(r.ReqPerSRuns))
		for i, v := range r.ReqPerSRuns {
			runs[i] = strconv.FormatFloat(v, 'f', 1, 64)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%.0f\t%.0f\t%d\t%s\t%s\t%s\t%s\t\n", r.Targets, r.Streams, r.name(),
			opt(r.ReqPerS, 1, 1), strings.Join(runs, " "), opt(r.ReqPerSVsDirect, 1, 3), r.P50us/1000, r.P99us/1000, r.Errors,
			opt(r.RSSIdleKB, 1.0/1024, 1), opt(r.RSSOpenKB, 1.0/1024, 1), opt(r.RSSPerStreamKB, 1, 1), opt(r.CPUPer1k, 1, 3))
	}
	tw.Flush()
}

func printCells(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "targets\tmode\tpath\tp50 µs\tp99 µs\tp99.9 µs\t+p50 µs\t+p99 µs\t+p99.9 µs\terrors\tmax rate/s (p99<limit)\tCPU s/1k req\tidle CPU ms/s\tidle share\twait ms/s\t")
	f0 := func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
	opt := func(v *float64, prec int) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatFloat(*v, 'f', prec, 64)
	}
	for _, r := range rows {
		share := "-"
		if r.IdleShare != nil {
			share = strconv.FormatFloat(*r.IdleShare*100, 'f', 1, 64) + " %"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t\n", r.Targets, r.Mode, r.name(),
			f0(r.P50us), f0(r.P99us), f0(r.P999us), opt(r.AddedP50us, 0), opt(r.AddedP99us, 0), opt(r.AddedP999us, 0),
			r.Errors, r.MaxRate, opt(r.CPUPer1k, 4), opt(r.IdleCPUmsPerS, 2), share, opt(r.RunqWaitMsPerS, 0))
	}
	tw.Flush()
}

func (r Row) name() string {
	if r.Strategy == "" {
		return r.Path
	}
	return r.Path + " " + r.Strategy
}
