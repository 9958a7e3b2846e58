// Package overhead owns `rolter bench overhead`: what a proxy adds to a
// request on its way to an engine. One instant-mode sim engine (steps take
// no time) serves the OpenAI API on one or more loopback ports; an
// open-loop generator sends the same requests to it directly, through
// `rolter router` and through nginx, each started as a subprocess with a
// generated config. It reports latency percentiles at a fixed rate, the
// latency the proxy adds over direct, the highest rate sustained under a
// p99 limit and the proxy processes' CPU seconds per 1000 requests.
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
	"strconv"
	"text/tabwriter"
	"time"
)

// Config is one benchmark run.
type Config struct {
	Rate     float64       // fixed rate (requests/s) of the latency measurement
	Duration time.Duration // length of the fixed-rate measurement
	// The max-rate search: SearchStart × SearchFactor^k up to SearchMax,
	// SearchDuration each, while p99 < P99Limit and errors < 0.1 %.
	SearchStart, SearchFactor, SearchMax float64
	SearchDuration, P99Limit             time.Duration
	Targets                              []int    // ports of the one sim, per run
	Strategies                           []string // router strategies, one column each
	Modes                                []string // "plain" and/or "stream"
	// PromptWords is the user message's length of the default chat
	// request; PromptTokens > 0 sends /v1/completions requests whose
	// prompt is that many token ids instead.
	PromptWords, PromptTokens, MaxTokens int
	Nginx                                string // nginx binary; "" skips the column
	RouterBin                            string // rolter binary run as `rolter router`; "" skips the column
	WorkDir                              string // generated configs and logs
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
	Mode         string  `json:"mode"`
	PromptTokens int     `json:"prompt_tokens,omitempty"` // 0: the chat request
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
	// CPU seconds of the proxy's processes per 1000 requests during the
	// fixed-rate run; nil for direct.
	CPUPer1k *float64 `json:"cpu_s_per_1k,omitempty"`
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
		got, err := runTargets(ctx, cfg, n)
		rows = append(rows, got...)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

func (c *Config) check() error {
	if c.Rate <= 0 || c.SearchStart <= 0 || c.SearchFactor <= 1 || c.Duration <= 0 || c.SearchDuration <= 0 {
		return fmt.Errorf("%w: rates and durations must be positive, the search factor > 1", ErrConfig)
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

// runTargets measures every column against one sim on n ports.
func runTargets(ctx context.Context, cfg Config, n int) ([]Row, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addrs, err := startSims(ctx, n)
	if err != nil {
		return nil, err
	}
	cols := []func() (column, error){func() (column, error) { return directColumn(addrs), nil }}
	if cfg.RouterBin != "" {
		for _, s := range cfg.Strategies {
			cols = append(cols, func() (column, error) { return routerColumn(ctx, cfg, s, addrs) })
		}
	}
	if cfg.Nginx != "" {
		cols = append(cols, func() (column, error) { return nginxColumn(ctx, cfg, addrs) })
	}
	var rows []Row
	direct := map[string]loadStats{}
	for _, mk := range cols {
		col, err := mk()
		if err != nil {
			return rows, err
		}
		for _, mode := range cfg.Modes {
			st, maxRate, cpu := measure(ctx, cfg, col, mode)
			r := Row{Path: col.path, Strategy: col.strategy, Targets: n, Mode: mode, PromptTokens: cfg.PromptTokens,
				Pinned: cfg.Pin && col.pid != nil, Sent: st.sent, Errors: st.errors,
				P50us: us(st.p50), P99us: us(st.p99), P999us: us(st.p999), MaxRate: maxRate}
			if col.pid == nil {
				direct[mode] = st
			} else {
				r.CPUPer1k = &cpu
				if d, ok := direct[mode]; ok {
					r.AddedP50us, r.AddedP99us, r.AddedP999us = ptr(us(st.p50-d.p50)), ptr(us(st.p99-d.p99)), ptr(us(st.p999-d.p999))
				}
			}
			fmt.Fprintf(cfg.Log, "  %d targets %-6s %-34s p50 %v p99 %v max %.0f/s\n", n, mode, col.name(),
				st.p50.Round(time.Microsecond), st.p99.Round(time.Microsecond), maxRate)
			rows = append(rows, r)
		}
		if col.stop != nil {
			col.stop()
		}
		if err := ctx.Err(); err != nil {
			return rows, err
		}
	}
	return rows, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ptr(v float64) *float64 { return &v }

// measure runs the fixed-rate measurement and the max-rate search; cpu is
// the proxy's CPU seconds per 1000 requests of the fixed-rate run.
func measure(ctx context.Context, cfg Config, col column, mode string) (fixed loadStats, maxRate, cpu float64) {
	client := newClient()
	defer client.CloseIdleConnections()
	rq := benchRequest(cfg, mode == "stream")
	// Warm connections and caches at a modest rate.
	openLoop(ctx, client, col.base, rq, min(cfg.Rate, 500), 500*time.Millisecond)
	before := cpuTime(col.pid)
	fixed = openLoop(ctx, client, col.base, rq, cfg.Rate, cfg.Duration)
	if col.pid != nil && fixed.sent > 0 {
		cpu = (cpuTime(col.pid) - before).Seconds() * 1000 / float64(fixed.sent)
	}
	// A step that fails is run once more before the search stops, so one
	// burst of noise from a neighbour on a shared machine does not end it.
	for rate := cfg.SearchStart; rate <= cfg.SearchMax && ctx.Err() == nil; rate *= cfg.SearchFactor {
		ok := false
		for try := 0; try < 2 && !ok; try++ {
			ok = openLoop(ctx, client, col.base, rq, rate, cfg.SearchDuration).sustained(cfg.P99Limit)
		}
		if !ok {
			break
		}
		maxRate = rate
	}
	return fixed, maxRate, cpu
}

// PrintTable writes rows as an aligned table.
func PrintTable(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "targets\tmode\tpath\tp50 µs\tp99 µs\tp99.9 µs\t+p50 µs\t+p99 µs\t+p99.9 µs\terrors\tmax rate/s (p99<limit)\tCPU s/1k req\t")
	f0 := func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
	opt := func(v *float64, prec int) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatFloat(*v, 'f', prec, 64)
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%.0f\t%s\t\n", r.Targets, r.Mode, r.name(),
			f0(r.P50us), f0(r.P99us), f0(r.P999us), opt(r.AddedP50us, 0), opt(r.AddedP99us, 0), opt(r.AddedP999us, 0),
			r.Errors, r.MaxRate, opt(r.CPUPer1k, 3))
	}
	tw.Flush()
}

func (r Row) name() string {
	if r.Strategy == "" {
		return r.Path
	}
	return r.Path + " " + r.Strategy
}
