// Package overhead owns `rolter bench overhead`: what a proxy adds to a
// request on its way to an engine. One engine in this process serves the
// OpenAI API on one or more loopback ports: by default the instant-mode
// sim's answers to the benchmark's request, recorded once and replayed
// without decoding the request (engine.go, on fasthttp's server), or the
// sim itself. An open-loop generator (load.go, on fasthttp's client)
// sends the same requests to it directly, through `rolter router` and
// through nginx, each started as a subprocess with a generated config. It
// reports latency percentiles at a fixed rate over several windows that
// go round the paths, the latency the proxy adds over direct, the highest
// rate sustained under a p99 limit, searched for every path in turn at
// each step, and what the proxy's and the generator's CPUs did at it
// (search.go), the proxy processes' CPU seconds per 1000 requests
// (nanoseconds from the kernel's per-process CPU clock, the windows' mean
// without the highest and the lowest, cpu.go) and their CPU with no
// request in flight. Every window also reads what the host and other
// tasks took of the benchmark's CPUs, and a disturbed one is measured
// again (host.go). Its open-streams mode (streams.go) measures resident
// memory per open stream, split by a Go proxy's runtime figures
// (goruntime.go), and streaming throughput against direct.
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
	"os"
	"slices"
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
	// request is their trimmed mean (trimmedMean), latency percentiles
	// are over every request of them.
	Windows int
	// Idle is how long each proxy's CPU is read with no request in
	// flight, after it answered its first and a second's settling; 0
	// skips it.
	Idle time.Duration
	// The max-rate search: SearchStart × SearchFactor^k up to SearchMax,
	// SearchDuration each, while p99 < P99Limit and errors < 0.1 %.
	SearchStart, SearchFactor, SearchMax float64
	SearchDuration, P99Limit             time.Duration
	// SearchBisect is how many more steps bisect between the last rate
	// that held and the first that failed (search.go).
	SearchBisect int
	// Disturbed is the steal plus other tasks' time on the proxy's CPU,
	// or per CPU on the generator's, ms per second of window, above which
	// a window is measured again (host.go); 0 never does. Reruns bounds
	// the extra windows per cell.
	Disturbed  float64
	Reruns     int
	Targets    []int    // ports of the one engine, per run
	Strategies []string // router strategies, one column each
	Modes      []string // "plain" and/or "stream"
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

	// host reads /proc/stat's times for the proxy's CPU and the others;
	// nil: the real file (tests inject readings).
	host func() (hostSample, error)
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
	// The lowest rate the search saw fail above MaxRate: the rate where
	// the path stops holding is between the two. nil when none failed up
	// to the search's limit.
	MaxRateFail *float64 `json:"max_rate_fail,omitempty"`
	// What limited the max rate, from the try that held at MaxRate: the
	// share of the proxy's CPU that was not idle and the share the proxy's
	// processes used (nil for direct), and the share of the generator's
	// CPUs (the generator and the engine, this process) that was not
	// idle. A busy share near 1 is the CPU that could do no more.
	MaxRateProxyBusy  *float64 `json:"max_rate_proxy_cpu_busy,omitempty"`
	MaxRateProxyShare *float64 `json:"max_rate_proxy_cpu_share,omitempty"`
	MaxRateGenBusy    *float64 `json:"max_rate_generator_cpu_busy,omitempty"`
	// Every try of the max-rate search, in the order they ran.
	SearchTries []SearchTry `json:"search_tries,omitempty"`
	// CPU seconds of this process (the generator and the engine) per
	// 1000 requests in the fixed-rate windows, their trimmed mean: what
	// one request costs the generator's CPUs.
	GenCPUPer1k *float64 `json:"generator_cpu_s_per_1k,omitempty"`
	// CPU seconds of the proxy's processes per 1000 requests: all the CPU
	// they used in a fixed-rate window (background work included) over
	// the window's requests, the trimmed mean of the windows used (the
	// highest and the lowest left out); nil for direct.
	CPUPer1k *float64 `json:"cpu_s_per_1k,omitempty"`
	// CPUPer1k over nginx's in the same run, targets and mode (nil for
	// direct, nginx, or without nginx): what the criterion "≤ 2× nginx"
	// reads, and a figure the host's speed moves far less between runs
	// than either proxy's own, since it moves both.
	CPUVsNginx *float64 `json:"cpu_vs_nginx,omitempty"`
	Windows    int      `json:"windows,omitempty"`
	// Each used window's figure, and the trimmed mean of the same from
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
	// The host's steal and the other tasks' time on the proxy's CPU, ms
	// per second of window (medians of the windows used; other is nil
	// when not pinned), how many windows were measured again because they
	// exceeded the threshold, and whether a used window still did after
	// the bound of reruns: then the cell's figures are a disturbed
	// machine's.
	StealMsPerS *float64 `json:"steal_ms_per_s,omitempty"`
	OtherMsPerS *float64 `json:"other_cpu_ms_per_s,omitempty"`
	// The same per CPU on the generator's CPUs.
	GenStealMsPerS *float64 `json:"generator_steal_ms_per_s,omitempty"`
	GenOtherMsPerS *float64 `json:"generator_other_cpu_ms_per_s,omitempty"`
	Rerun          int      `json:"windows_rerun"`
	Disturbed      bool     `json:"disturbed"`
	// Every window measured, reruns included, in the order they ran.
	WindowRuns []WindowRun `json:"window_runs,omitempty"`

	// The open-streams mode (streams.go).
	Streams         int       `json:"streams,omitempty"`
	ReqPerS         *float64  `json:"req_per_s,omitempty"`      // median over the runs
	ReqPerSRuns     []float64 `json:"req_per_s_runs,omitempty"` // each run, in order
	ReqPerSVsDirect *float64  `json:"req_per_s_vs_direct,omitempty"`
	RSSIdleKB       *float64  `json:"rss_idle_kb,omitempty"` // before the first run
	RSSOpenKB       *float64  `json:"rss_open_kb,omitempty"` // median of the runs' medians while every stream is open
	RSSPerStreamKB  *float64  `json:"rss_kb_per_stream,omitempty"`
	// A Go proxy's runtime figures idle and with the streams open (medians
	// of the runs), and the RSS growth per stream split by them.
	RuntimeIdle *goRuntime    `json:"go_runtime_idle,omitempty"`
	RuntimeOpen *goRuntime    `json:"go_runtime_open,omitempty"`
	PerStream   *memBreakdown `json:"per_stream,omitempty"`
}

// WindowRun is one fixed-rate window of one path as measured.
type WindowRun struct {
	Slot   int     `json:"slot"` // which of the cell's windows it measured, from 0
	Sent   int     `json:"sent"`
	Errors int     `json:"errors"`
	P50us  float64 `json:"p50_us"`
	P99us  float64 `json:"p99_us"`
	// The proxy's CPU (nanosecond clock and ticks), run-queue wait and
	// context switches per request; zero for direct.
	CPUPer1k       float64 `json:"cpu_s_per_1k"`
	CPUPer1kTicks  float64 `json:"cpu_s_per_1k_ticks"`
	RunqWaitMsPerS float64 `json:"runq_wait_ms_per_s"`
	SwitchesPerReq float64 `json:"ctx_switches_per_req"`
	// This process's (generator and engine) CPU per 1000 requests.
	GenCPUPer1k float64 `json:"generator_cpu_s_per_1k"`
	// The proxy's processes' CPU time over the window's wall time (nil for
	// direct), and the share of the proxy's CPU and of the generator's
	// CPUs that was not idle (nil where /proc/stat could not be read; the
	// generator's only when pinned).
	ProxyCPUShare *float64 `json:"proxy_cpu_share,omitempty"`
	ProxyCPUBusy  *float64 `json:"proxy_cpu_busy,omitempty"`
	GenCPUBusy    *float64 `json:"generator_cpu_busy,omitempty"`
	// GC cycles the proxy's Go runtime ran in the window (a router's
	// /metrics read at both ends); nil for others.
	GCCycles *float64 `json:"gc_cycles,omitempty"`
	// The host's readings (nil where /proc/stat could not be read) and
	// whether they exceeded the threshold, and whether this window is one
	// of the cell's figures (a rerun replaces a disturbed one).
	StealMsPerS *float64 `json:"steal_ms_per_s,omitempty"`
	OtherMsPerS *float64 `json:"other_cpu_ms_per_s,omitempty"`
	// The same per CPU on the generator's CPUs (pinned only).
	GenStealMsPerS *float64 `json:"generator_steal_ms_per_s,omitempty"`
	GenOtherMsPerS *float64 `json:"generator_other_cpu_ms_per_s,omitempty"`
	Disturbed      bool     `json:"disturbed"`
	Used           bool     `json:"used"`
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
	if c.SearchBisect < 0 || c.SearchBisect > 10 || c.Reruns < 0 || c.Disturbed < 0 {
		return fmt.Errorf("%w: bisection steps (at most 10), reruns and the disturbance threshold must be ≥ 0", ErrConfig)
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
// path's windows alike, not on one path's whole cell.
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
				P50us: us(st.p50), P99us: us(st.p99), P999us: us(st.p999), Windows: cfg.Windows,
				WindowRuns: c.runs, Rerun: c.reruns}
			setSearch(&r, c.search)
			if col.pid == nil {
				r.MaxRateProxyBusy = nil // no proxy: CPU 0 ran only the neighbours
			}
			var gen []float64
			for _, w := range c.used() {
				gen = append(gen, w.GenCPUPer1k)
			}
			r.GenCPUPer1k = ptr(trimmedMean(gen))
			if col.pid != nil {
				summarise(&r, c.used())
				r.AddedP50us, r.AddedP99us, r.AddedP999us = ptr(us(st.p50-d.p50)), ptr(us(st.p99-d.p99)), ptr(us(st.p999-d.p999))
				if idle[i] != nil && *r.CPUPer1k > 0 {
					// idle ms in a window's length ÷ the window's CPU in ms
					// (s per 1000 requests × requests = ms)
					r.IdleCPUmsPerS = idle[i]
					r.IdleShare = ptr(*idle[i] * cfg.Duration.Seconds() / (*r.CPUPer1k * float64(st.sent) / float64(cfg.Windows)))
				}
			}
			fmt.Fprintf(cfg.Log, "  %d targets %-6s %-34s p50 %v p99 %v max %.0f/s%s%s\n", n, mode, col.name(),
				st.p50.Round(time.Microsecond), st.p99.Round(time.Microsecond), r.MaxRate, windowsNote(c.runs), triesNote(r.SearchTries))
			rows = append(rows, r)
		}
		relateToNginx(rows[len(rows)-len(cols):])
	}
	return rows, nil
}

// relateToNginx sets each rolter row's CPUVsNginx from the nginx row
// among rows (one mode's cells), if there is one with a CPU figure.
func relateToNginx(rows []Row) {
	var ng *float64
	for _, r := range rows {
		if r.Path == "nginx" && r.CPUPer1k != nil && *r.CPUPer1k > 0 {
			ng = r.CPUPer1k
		}
	}
	if ng == nil {
		return
	}
	for i := range rows {
		if r := &rows[i]; r.Path != "nginx" && r.CPUPer1k != nil {
			r.CPUVsNginx = ptr(*r.CPUPer1k / *ng)
		}
	}
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

// setSearch sets r's max-rate figures from its path's search.
func setSearch(r *Row, s *search) {
	if s == nil {
		return
	}
	r.MaxRate, r.SearchTries = s.maxRate(), s.tries
	if f := s.failRate(); f > 0 {
		r.MaxRateFail = ptr(f)
	}
	if t := s.heldTry(); t != nil {
		r.MaxRateProxyBusy, r.MaxRateProxyShare, r.MaxRateGenBusy = t.ProxyCPUBusy, t.ProxyCPUShare, t.GenCPUBusy
	}
}

// triesNote is a progress line's list of the search's tries: the rate,
// + held or - failed, a star on the disturbed ones and brackets round
// the ones not counted.
func triesNote(tries []SearchTry) string {
	if len(tries) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(" tries:")
	for _, t := range tries {
		item := strconv.FormatFloat(t.Rate, 'f', 0, 64)
		if t.Held {
			item += "+"
		} else {
			item += "-"
		}
		if t.Disturbed {
			item += "*"
		}
		if !t.Used {
			item = "[" + item + "]"
		}
		b.WriteString(" " + item)
	}
	return b.String()
}

// summarise sets a proxy's row figures from its used windows.
func summarise(r *Row, used []WindowRun) {
	var cpu, ticks, wait []float64
	for _, w := range used {
		cpu, ticks, wait = append(cpu, w.CPUPer1k), append(ticks, w.CPUPer1kTicks), append(wait, w.RunqWaitMsPerS)
		r.Disturbed = r.Disturbed || w.Disturbed
	}
	r.CPUPer1k, r.CPUPer1kTicks, r.CPUPer1kWindows = ptr(trimmedMean(cpu)), ptr(trimmedMean(ticks)), cpu
	r.RunqWaitMsPerS = ptr(median(wait))
	r.StealMsPerS = medianOf(used, func(w WindowRun) *float64 { return w.StealMsPerS })
	r.OtherMsPerS = medianOf(used, func(w WindowRun) *float64 { return w.OtherMsPerS })
	r.GenStealMsPerS = medianOf(used, func(w WindowRun) *float64 { return w.GenStealMsPerS })
	r.GenOtherMsPerS = medianOf(used, func(w WindowRun) *float64 { return w.GenOtherMsPerS })
}

// medianOf is the median of a figure over the windows that have it; nil
// when none has.
func medianOf(ws []WindowRun, get func(WindowRun) *float64) *float64 {
	var vs []float64
	for _, w := range ws {
		if v := get(w); v != nil {
			vs = append(vs, *v)
		}
	}
	if len(vs) == 0 {
		return nil
	}
	return ptr(median(vs))
}

// windowsNote is a progress line's list of a proxy's windows in the order
// they ran: CPU per request, run-queue wait, the disturbance, a star on
// the disturbed ones and brackets round the ones not used.
func windowsNote(runs []WindowRun) string {
	if len(runs) == 0 || runs[0].CPUPer1k == 0 && runs[0].RunqWaitMsPerS == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(" windows (CPU s/1k, wait, disturbance ms/s):")
	for _, w := range runs {
		mark := ""
		if w.Disturbed {
			mark = "*"
		}
		item := fmt.Sprintf("%.4f %.0f %.0f%s", w.CPUPer1k, w.RunqWaitMsPerS, w.disturbance(), mark)
		if !w.Used {
			item = "[" + item + "]"
		}
		b.WriteString(" " + item)
	}
	return b.String()
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ptr[T any](v T) *T { return &v }

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

// cell is one (column, mode) measured: every window run (reruns
// included) and its requests, the used windows' requests pooled, how
// many windows were measured again, and the max-rate search's result.
type cell struct {
	runs   []WindowRun
	stats  []loadStats // runs[i]'s requests
	fixed  loadStats
	reruns int
	search *search
}

// used is the cell's windows that are its figures, one per slot, in
// slot order.
func (c cell) used() []WindowRun {
	var out []WindowRun
	for _, w := range c.runs {
		if w.Used {
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b WindowRun) int { return a.Slot - b.Slot })
	return out
}

// worst is the index in c.runs of the most disturbed used window, -1 when
// none is disturbed.
func (c cell) worst() int {
	at := -1
	for i, w := range c.runs {
		if w.Used && w.Disturbed && (at < 0 || w.disturbance() > c.runs[at].disturbance()) {
			at = i
		}
	}
	return at
}

// measure runs one mode's fixed-rate windows, round the columns
// Windows times, each round in its own order (rotation), then the
// columns' max-rate searches, interleaved (search.go). A proxy's window
// the host disturbed (WindowRun.disturbance above cfg.Disturbed) is
// measured again after the rounds, not at once, so a disturbance that
// lasts a few seconds has passed: rounds of reruns go over the columns
// again, each rerunning its most disturbed window, up to cfg.Reruns per
// cell. A rerun takes the slot when it is less disturbed; the window it
// replaces stays in the record.
func measure(ctx context.Context, cfg Config, cols []column, mode string) []cell {
	rq := benchRequest(cfg, mode == "stream")
	host := cfg.host
	if host == nil {
		cpu := -1
		if cfg.Pin {
			cpu = cfg.ProxyCPU
		}
		host = procStatReader(cpu)
	}
	gens := make([]*generator, len(cols))
	for i, col := range cols {
		gens[i] = newGenerator(col.hosts)
		defer gens[i].close()
		// Warm connections and caches at a modest rate.
		openLoop(ctx, gens[i], col.base, rq, min(cfg.Rate, 500), 500*time.Millisecond)
	}
	cells := make([]cell, len(cols))
	run := func(i, slot int) {
		w, st := window(ctx, cfg, gens[i], cols[i], rq, host, cfg.Rate, cfg.Duration)
		w.Slot = slot
		w.Disturbed = w.Disturbed && cols[i].pid != nil // direct's windows are not measured again
		cells[i].runs, cells[i].stats = append(cells[i].runs, w), append(cells[i].stats, st)
	}
	for slot := range cfg.Windows {
		for _, i := range rotation(slot, len(cols)) {
			if ctx.Err() != nil {
				return cells
			}
			run(i, slot)
			cells[i].runs[len(cells[i].runs)-1].Used = true
		}
	}
	for round, again := cfg.Windows, true; again && ctx.Err() == nil; round++ {
		again = false
		for _, i := range rotation(round, len(cols)) {
			c := &cells[i]
			old := c.worst()
			if old < 0 || c.reruns >= cfg.Reruns || ctx.Err() != nil {
				continue
			}
			c.reruns++
			again = true
			run(i, c.runs[old].Slot)
			if n := len(c.runs) - 1; c.runs[n].disturbance() < c.runs[old].disturbance() {
				c.runs[old].Used, c.runs[n].Used = false, true
			}
		}
	}
	for i := range cols {
		var used []loadStats
		for k, w := range cells[i].runs {
			if w.Used {
				used = append(used, cells[i].stats[k])
			}
		}
		cells[i].fixed = pool(used)
	}
	searches := make([]*search, len(cols))
	for i := range cols {
		searches[i] = newSearch(cfg.SearchStart, cfg.SearchFactor, cfg.SearchMax, cfg.SearchBisect)
		cells[i].search = searches[i]
	}
	interleave(ctx, searches, func(i int, rate float64) SearchTry {
		w, st := window(ctx, cfg, gens[i], cols[i], rq, host, rate, cfg.SearchDuration)
		return SearchTry{WindowRun: w, Held: st.sustained(cfg.P99Limit)}
	})
	return cells
}

// rotation is the order in which round r goes over n columns: column
// r mod n first, then on round the list. Each column takes each place in
// a round in turn, so none always runs right after direct, or first in
// a round, where a neighbour's rhythm or the generator's state at the
// round's start would fall on it alone.
func rotation(r, n int) []int {
	out := make([]int, n)
	for k := range out {
		out[k] = (r + k) % n
	}
	return out
}

// window runs one window of rate requests/s for dur against col (a
// fixed-rate window or a try of the max-rate search) and reads what the
// proxy, this process (the generator and the engine) and the host did
// in it, and whether the neighbours disturbed it (over cfg.Disturbed).
// The proxy's runtime figures (GC cycles) are read outside the
// CPU readings, so the scrape's own cost is not counted.
func window(ctx context.Context, cfg Config, g *generator, col column, rq request, host func() (hostSample, error), rate float64, dur time.Duration) (WindowRun, loadStats) {
	var gc0 goRuntime
	gcOK := false
	if col.metrics != "" {
		var err error
		gc0, err = scrapeGoRuntime(ctx, col.metrics)
		gcOK = err == nil
	}
	sw0 := ctxSwitches(col.pid)
	h0, hostErr := host()
	self0, selfErr := processClock(os.Getpid())
	before, t0 := readCPU(col.pid), time.Now()
	st := openLoop(ctx, g, col.base, rq, rate, dur)
	used, el := readCPU(col.pid).sub(before), time.Since(t0)
	self1, selfErr1 := processClock(os.Getpid())
	h1, hostErr1 := host()
	sw1 := ctxSwitches(col.pid)
	w := WindowRun{Sent: st.sent, Errors: st.errors, P50us: us(st.p50), P99us: us(st.p99)}
	if col.pid != nil && st.sent > 0 {
		w.CPUPer1k = used.Exact.Seconds() * 1000 / float64(st.sent)
		w.CPUPer1kTicks = used.Ticks.Seconds() * 1000 / float64(st.sent)
		w.RunqWaitMsPerS = float64(used.Wait) / float64(time.Millisecond) / el.Seconds()
		w.SwitchesPerReq = (sw1 - sw0) / float64(st.sent)
	}
	var self time.Duration
	if selfErr == nil && selfErr1 == nil {
		self = self1 - self0
		if st.sent > 0 {
			w.GenCPUPer1k = self.Seconds() * 1000 / float64(st.sent)
		}
	}
	if col.pid != nil {
		w.ProxyCPUShare = ptr(used.Exact.Seconds() / el.Seconds())
	}
	if hostErr == nil && hostErr1 == nil {
		w.setDisturbance(h1.sub(h0), used.Exact, self, el, cfg.Pin)
	}
	w.Disturbed = cfg.Disturbed > 0 && w.disturbance() > cfg.Disturbed
	if gcOK {
		if gc1, err := scrapeGoRuntime(ctx, col.metrics); err == nil {
			w.GCCycles = ptr(gc1.GCCycles - gc0.GCCycles)
		}
	}
	return w, st
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
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := false
	for _, r := range rows {
		m := r.PerStream
		if m == nil {
			continue
		}
		if !header {
			fmt.Fprintln(w, "\nper open stream, from the Go runtime's /metrics idle and open (file pages: RssFile's growth; the rest: RSS growth the others do not explain):")
			fmt.Fprintln(tw, "targets\tpath\tRSS KB\theap in use KB\tfree heap kept KB\tstacks KB\tgoroutines\tfile pages KB\trest KB\tnext GC MB idle → open\t")
			header = true
		}
		fmt.Fprintf(tw, "%d\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%.1f\t%.1f\t%.1f → %.1f\t\n", r.Targets, r.name(), *r.RSSPerStreamKB,
			m.HeapKB, m.HeapKeptKB, m.StackKB, m.Goroutines, m.FileKB, m.RestKB, r.RuntimeIdle.NextGC/(1<<20), r.RuntimeOpen.NextGC/(1<<20))
	}
	tw.Flush()
}

func printCells(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "targets\tmode\tpath\tp50 µs\tp99 µs\tp99.9 µs\t+p50 µs\t+p99 µs\t+p99.9 µs\terrors\tmax rate/s (p99<limit)\tfailed at\tat max: proxy CPU busy (proxy's own)\tgenerator CPUs busy\t"+
		"CPU s/1k req\t÷ nginx\tidle CPU ms/s\tidle share\twait ms/s\tsteal ms/s\tother ms/s\tgenerator steal/other\tgenerator CPU s/1k req\treruns\t")
	f0 := func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
	opt := func(v *float64, prec int) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatFloat(*v, 'f', prec, 64)
	}
	disturbed := 0
	for _, r := range rows {
		share := "-"
		if r.IdleShare != nil {
			share = strconv.FormatFloat(*r.IdleShare*100, 'f', 1, 64) + " %"
		}
		cpu := opt(r.CPUPer1k, 4)
		if r.Disturbed {
			cpu += " (disturbed)"
			disturbed++
		}
		proxyBusy := pct(r.MaxRateProxyBusy)
		if r.MaxRateProxyShare != nil {
			proxyBusy += " (" + pct(r.MaxRateProxyShare) + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s/%s\t%s\t%d\t\n", r.Targets, r.Mode, r.name(),
			f0(r.P50us), f0(r.P99us), f0(r.P999us), opt(r.AddedP50us, 0), opt(r.AddedP99us, 0), opt(r.AddedP999us, 0),
			r.Errors, r.MaxRate, opt(r.MaxRateFail, 0), proxyBusy, pct(r.MaxRateGenBusy), cpu, opt(r.CPUVsNginx, 2), opt(r.IdleCPUmsPerS, 2), share, opt(r.RunqWaitMsPerS, 0),
			opt(r.StealMsPerS, 0), opt(r.OtherMsPerS, 0), opt(r.GenStealMsPerS, 0), opt(r.GenOtherMsPerS, 0), opt(r.GenCPUPer1k, 4), r.Rerun)
	}
	tw.Flush()
	if disturbed > 0 {
		fmt.Fprintf(w, "\n%d cell(s) marked disturbed: a window they use still had more steal + other tasks' time on the proxy's CPU (or per CPU on the generator's) than the threshold after the bound of reruns; their CPU figure is a disturbed machine's.\n", disturbed)
	}
}

// pct is a share as a whole percentage, "-" when unknown.
func pct(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v*100, 'f', 0, 64) + " %"
}

func (r Row) name() string {
	if r.Strategy == "" {
		return r.Path
	}
	return r.Path + " " + r.Strategy
}
