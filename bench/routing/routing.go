// Package routing owns `rolter bench routing`: every strategy (and an
// oracle that sees the future) run over one workload in the
// discrete-event fleet simulator (sim/fleet) at several router replica
// counts, the table of hit rate, TTFT, latency, throughput and imbalance
// with ratios to round_robin and the oracle, and the charts of TTFT p90
// against load and hit rate against replicas (gonum.org/v1/plot), and
// the admission burst (burst.go: per priority band, admission off and
// on). cmd/rolter parses the flags and calls it.
package routing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/rolter/rolter/data/mooncake"
	"github.com/rolter/rolter/sim/engine"
	"github.com/rolter/rolter/sim/fleet"
	"github.com/rolter/rolter/sim/workload"
)

// Row is one line of the report (and of --json): one strategy at one
// replica count.
type Row struct {
	Strategy   string  `json:"strategy"`
	Routers    int     `json:"routers"`
	Load       float64 `json:"load"`
	HitRate    float64 `json:"hit_rate"`
	TTFTP50    float64 `json:"ttft_p50_ms"`
	TTFTP90    float64 `json:"ttft_p90_ms"`
	TTFTP99    float64 `json:"ttft_p99_ms"`
	E2EP50     float64 `json:"e2e_p50_ms"`
	E2EP99     float64 `json:"e2e_p99_ms"`
	Throughput float64 `json:"throughput_tok_s"`
	Imbalance  float64 `json:"imbalance"`
	Failed     int     `json:"failed,omitempty"`
	// HeldMean is the mean wait of a request at its router before its
	// pick (the mesh's order of the first picks of an instant), in ms.
	HeldMean      float64            `json:"held_mean_ms,omitempty"`
	VsRoundRobin  map[string]float64 `json:"vs_round_robin,omitempty"`
	VsOracle      map[string]float64 `json:"vs_oracle,omitempty"`
	PerEngineReqs []int              `json:"per_engine_requests"`
}

func (r Row) metrics() []float64 {
	return []float64{r.HitRate, r.TTFTP50, r.TTFTP90, r.TTFTP99, r.E2EP50, r.E2EP99, r.Throughput, r.Imbalance}
}

var metricNames = []string{"hit_rate", "ttft_p50", "ttft_p90", "ttft_p99", "e2e_p50", "e2e_p99", "throughput", "imbalance"}

// ErrWorkload marks an unknown workload name.
var ErrWorkload = errors.New("unknown workload")

// SourceOptions choose the workload: a Mooncake-format trace (Workload
// "trace"; Trace "" is the embedded one) or a synthetic generator (chat,
// rag, lora, mixed), its first Limit requests (0: all of a trace, 2000
// synthetic), Seed for the generators and SpreadBatches.
type SourceOptions struct {
	Trace, Workload string
	Limit           int
	Seed            uint64
	// SpreadBatches spreads trace requests sharing a timestamp over the
	// interval to the next one (see SpreadBatches).
	SpreadBatches bool
}

// Source gives the workload to simulate at a target arrival rate. A
// trace is rescaled in time by the simulator (Config.Rate), keeping its
// burst pattern. A synthetic workload is generated at that rate instead,
// so its think times between a session's turns stay as designed.
type Source struct {
	// Desc names the workload in the report's header.
	Desc string
	// Unit is the workload as recorded (trace) or at 1 request/s
	// (synthetic); capacity is computed on it.
	Unit *fleet.Workload
	gen  func(rate float64) ([]workload.Request, error) // nil for a trace
}

// At returns the workload for rate and the Config.Rate to run it with.
func (s Source) At(rate float64) (*fleet.Workload, float64, error) {
	if s.gen == nil {
		return s.Unit, rate, nil
	}
	reqs, err := s.gen(rate)
	if err != nil {
		return nil, 0, err
	}
	w, err := fleet.Prepare(fleet.FromWorkload(reqs), engine.DefaultConfig.BlockSize)
	return w, 0, err
}

// LoadSource reads the trace or sets up the synthetic generator.
func LoadSource(o SourceOptions) (Source, error) {
	n := o.Limit
	if n <= 0 {
		n = 2000
	}
	var src Source
	switch o.Workload {
	case "trace":
		var in io.Reader = mooncake.Open()
		src.Desc = "trace " + mooncake.Name
		if o.Trace != "" {
			file, err := os.Open(o.Trace)
			if err != nil {
				return src, fmt.Errorf("--trace: %w", err)
			}
			defer file.Close()
			in, src.Desc = file, "trace "+o.Trace
		}
		recs, err := workload.ReadTrace(in, o.Limit)
		if err != nil {
			return src, err
		}
		reqs := workload.FromTrace(recs, false)
		if o.SpreadBatches {
			SpreadBatches(reqs, o.Seed)
			src.Desc += " (batches spread)"
		}
		src.Unit, err = fleet.Prepare(fleet.FromWorkload(reqs), engine.DefaultConfig.BlockSize)
		return src, err
	case "chat", "rag", "lora":
		src.Desc = "synthetic " + o.Workload
		src.gen = func(rate float64) ([]workload.Request, error) { return workload.Synthetic(o.Workload, o.Seed, n, rate) }
	case "mixed":
		src.Desc = "synthetic mixed (chat + rag + lora)"
		src.gen = func(rate float64) ([]workload.Request, error) {
			var reqs []workload.Request
			for i, name := range []string{"chat", "rag", "lora"} {
				part, err := workload.Synthetic(name, o.Seed+uint64(i), (n+2)/3, rate/3)
				if err != nil {
					return nil, err
				}
				reqs = append(reqs, part...)
			}
			slices.SortStableFunc(reqs, func(a, b workload.Request) int { return cmp.Compare(a.At, b.At) })
			return reqs, nil
		}
	default:
		return src, fmt.Errorf("%w: must be trace, chat, rag, lora or mixed", ErrWorkload)
	}
	var err error
	src.Unit, _, err = src.At(1)
	return src, err
}

// SpreadBatches moves the requests of each run sharing one send time to
// uniformly drawn times between it and the next distinct send time (the
// Mooncake trace records arrivals in 3 s batches), keeping their order.
func SpreadBatches(reqs []workload.Request, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	for i := 0; i < len(reqs); {
		j := i
		for j < len(reqs) && reqs[j].At == reqs[i].At {
			j++
		}
		if j < len(reqs) {
			gap := reqs[j].At - reqs[i].At
			offs := make([]time.Duration, j-i)
			for k := range offs {
				offs[k] = time.Duration(rng.Int64N(int64(gap)))
			}
			slices.Sort(offs)
			for k := range offs {
				reqs[i+k].At += offs[k]
			}
		}
		i = j
	}
}

// Grid runs every strategy at every replica count, and the oracle
// once (it has no replicas to disagree), in parallel; the rows come back
// in a fixed order with ratios filled in.
func Grid(ctx context.Context, src Source, base fleet.Config, names []string, routers []int,
	load, capacity float64, parallel int) ([]Row, error) {
	w, rate, err := src.At(load * capacity)
	if err != nil {
		return nil, err
	}
	var jobs []simJob
	o := base
	o.Strategy, o.Routers, o.Rate = fleet.Oracle, 1, rate
	jobs = append(jobs, simJob{o, w})
	for _, r := range routers {
		for _, n := range names {
			c := base
			c.Strategy, c.Routers, c.Rate = n, r, rate
			jobs = append(jobs, simJob{c, w})
		}
	}
	results, err := runAll(ctx, jobs, parallel)
	if err != nil {
		return nil, err
	}
	var rows []Row
	oracle := toRow(results[0], load)
	for _, r := range routers {
		row := oracle
		row.Routers = r
		rows = append(rows, row)
		for _, res := range results[1:] {
			if res.Routers == r {
				rows = append(rows, toRow(res, load))
			}
		}
	}
	addRatios(rows)
	return rows, nil
}

// simJob is one simulation: a config and the (shared, read-only) workload.
type simJob struct {
	cfg fleet.Config
	w   *fleet.Workload
}

// runAll runs the jobs on `parallel` goroutines; result i is job i's.
func runAll(ctx context.Context, jobs []simJob, parallel int) ([]fleet.Result, error) {
	results := make([]fleet.Result, len(jobs))
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i], errs[i] = fleet.Run(ctx, jobs[i].cfg, jobs[i].w)
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	return results, errors.Join(errs...)
}

func toRow(r fleet.Result, load float64) Row {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	row := Row{Strategy: r.Strategy, Routers: r.Routers, Load: load, HitRate: r.HitRate,
		TTFTP50: ms(r.TTFT.P50), TTFTP90: ms(r.TTFT.P90), TTFTP99: ms(r.TTFT.P99),
		E2EP50: ms(r.E2E.P50), E2EP99: ms(r.E2E.P99), Throughput: r.Throughput, Imbalance: r.Imbalance,
		Failed: r.Failed, PerEngineReqs: r.PerEngine}
	if r.Requests > 0 {
		row.HeldMean = ms(r.Held) / float64(r.Requests)
	}
	return row
}

// addRatios divides every metric by round_robin's and the oracle's at the
// same replica count.
func addRatios(rows []Row) {
	ref := func(name string, routers int) (Row, bool) {
		for _, r := range rows {
			if r.Strategy == name && r.Routers == routers {
				return r, true
			}
		}
		return Row{}, false
	}
	ratio := func(r, b Row) map[string]float64 {
		m := map[string]float64{}
		bm := b.metrics()
		for i, v := range r.metrics() {
			if bm[i] != 0 {
				m[metricNames[i]] = v / bm[i]
			}
		}
		return m
	}
	for i := range rows {
		if b, ok := ref("round_robin", rows[i].Routers); ok {
			rows[i].VsRoundRobin = ratio(rows[i], b)
		}
		if b, ok := ref(fleet.Oracle, rows[i].Routers); ok {
			rows[i].VsOracle = ratio(rows[i], b)
		}
	}
}

func Print(w io.Writer, rows []Row, routers []int) {
	for _, r := range routers {
		fmt.Fprintf(w, "routers=%d\n", r)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "strategy\thit%\tttft p50\tp90\tp99 ms\te2e p50\tp99 ms\ttok/s\timbal\t│ hit/rr\tp90/rr\t│ hit/or\tp90/or\tp99/or\t")
		for _, row := range rows {
			if row.Routers != r {
				continue
			}
			fmt.Fprintf(tw, "%s\t%.1f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.2f\t│ %.2f\t%.2f\t│ %.2f\t%.2f\t%.2f\t\n",
				row.Strategy, 100*row.HitRate, row.TTFTP50, row.TTFTP90, row.TTFTP99, row.E2EP50, row.E2EP99,
				row.Throughput, row.Imbalance, row.VsRoundRobin["hit_rate"], row.VsRoundRobin["ttft_p90"],
				row.VsOracle["hit_rate"], row.VsOracle["ttft_p90"], row.VsOracle["ttft_p99"])
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
}
