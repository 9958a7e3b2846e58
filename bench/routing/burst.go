package routing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/rolter/rolter/router/admission"
	"github.com/rolter/rolter/sim/engine"
	"github.com/rolter/rolter/sim/fleet"
	"github.com/rolter/rolter/sim/workload"
)

// BurstRow is one band of one run of the admission benchmark (and of
// --json).
type BurstRow struct {
	Pattern   string `json:"pattern"` // "flat" (Base throughout) or "burst"
	Strategy  string `json:"strategy"`
	Routers   int    `json:"routers"`
	Admission bool   `json:"admission"`
	// QueuesAlone: the replicas did not see each other's waiters (the
	// ablation of the peer rule; rolter router publishes them).
	QueuesAlone bool    `json:"queues_alone,omitempty"`
	Band        string  `json:"band"`
	Requests    int     `json:"requests"`
	Served      int     `json:"served"`
	Rejected    int     `json:"rejected"`
	Expired     int     `json:"expired"`
	Lost        int     `json:"lost"` // neither served, rejected nor expired
	TTFTP50     float64 `json:"ttft_p50_ms"`
	TTFTP90     float64 `json:"ttft_p90_ms"`
	TTFTP99     float64 `json:"ttft_p99_ms"`
	// WaitP50/WaitP90 are the served requests' time in a router's queue.
	WaitP50 float64 `json:"queue_wait_p50_ms"`
	WaitP90 float64 `json:"queue_wait_p90_ms"`
	// Admitted is how many requests admission let through, Overfull how
	// many of them went to an engine that all routers' counts together
	// showed saturated for their band already (a stampede's mark).
	Admitted int `json:"admitted,omitempty"`
	Overfull int `json:"overfull,omitempty"`
}

// BurstOptions configure RunBurst.
type BurstOptions struct {
	Workload    string // synthetic: chat, rag or lora
	Strategies  []string
	Routers     []int
	Engines     int
	Engine      engine.Config
	GossipDelay time.Duration
	PeerDelay   time.Duration
	Seed        uint64
	Isolated    bool
	Parallel    int
	// Thresholds are the replicas' [admission] saturation thresholds and
	// Fills the bands' fills (by admission.Band; 0 keeps the default); the
	// rest of the section keeps its defaults.
	Thresholds admission.Thresholds
	Fills      [admission.NumBands]float64
}

// ErrBurstWorkload marks a workload the burst cannot run.
var ErrBurstWorkload = errors.New("--burst runs on a synthetic workload: chat, rag or lora")

// RunBurst is `rolter bench routing --burst`: per strategy and router
// count, runs of the same requests: the flat pattern with admission off
// and on (on is the reference of the critical target), the burst with
// admission off and on, and with more than one router the burst with each
// replica's queue alone (not published to the others). It prints the
// table to out and returns its rows.
func RunBurst(ctx context.Context, o BurstOptions, out io.Writer) ([]BurstRow, error) {
	switch o.Workload {
	case "chat", "rag", "lora":
	default:
		return nil, ErrBurstWorkload
	}
	ecfg := o.Engine
	names, routers := o.Strategies, o.Routers
	unit, err := workload.Synthetic(o.Workload, o.Seed, 2000, 1)
	if err != nil {
		return nil, err
	}
	uw, err := fleet.Prepare(fleet.FromWorkload(unit), engine.DefaultConfig.BlockSize)
	if err != nil {
		return nil, err
	}
	// The no-cache capacity understates a workload with prefix reuse: a
	// calibration run at half of it measures the hit rate, and the burst
	// is laid out on the capacity with that hit rate.
	nocache := fleet.Capacity(uw, o.Engines, ecfg)
	calib, err := workload.Synthetic(o.Workload, o.Seed, 2000, nocache/2)
	if err != nil {
		return nil, err
	}
	cw, err := fleet.Prepare(fleet.FromWorkload(calib), engine.DefaultConfig.BlockSize)
	if err != nil {
		return nil, err
	}
	cal, err := fleet.Run(ctx, fleet.Config{Strategy: names[0], Engines: o.Engines, Routers: routers[0], Engine: ecfg,
		GossipDelay: o.GossipDelay, PeerDelay: o.PeerDelay, Arrival: fleet.RandomArrival, Seed: o.Seed, Isolated: o.Isolated}, cw)
	if err != nil {
		return nil, err
	}
	capacity := fleet.CachedCapacity(uw, o.Engines, ecfg, cal.HitRate)
	shape := fleet.DefaultBurst
	n := shape.Requests(capacity) * 11 / 10 // Poisson arrivals may need a few more
	raw, err := workload.Synthetic(o.Workload, o.Seed, n, capacity)
	if err != nil {
		return nil, err
	}
	reqs := fleet.FromWorkload(raw)
	burst, err := shape.Apply(reqs, capacity, o.Seed)
	if err != nil {
		return nil, err
	}
	flat, err := shape.Flat().Apply(reqs, capacity, o.Seed)
	if err != nil {
		return nil, err
	}
	wb, err := fleet.Prepare(burst, engine.DefaultConfig.BlockSize)
	if err != nil {
		return nil, err
	}
	wf, err := fleet.Prepare(flat, engine.DefaultConfig.BlockSize)
	if err != nil {
		return nil, err
	}
	acfg := admission.DefaultConfig()
	acfg.Thresholds = o.Thresholds
	for b, f := range o.Fills {
		if f > 0 {
			acfg.Bands[b].Fill = f
		}
	}
	fmt.Fprintf(out, "burst: synthetic %s, %d requests; %.1f → %.1f → %.1f of capacity for %v / %v / %v; "+
		"fleet: %d engines, capacity %.2f req/s (service demand at the %.0f%% prefix hit rate %s measured at 0.5 of the no-cache %.2f req/s); "+
		"gossip delay %v; peer delay %v\n",
		o.Workload, wb.Len(), shape.Base, shape.Peak, shape.Base, shape.Warm, shape.Hold, shape.Cool,
		o.Engines, capacity, 100*cal.HitRate, names[0], nocache, o.GossipDelay, o.PeerDelay)
	fmt.Fprintf(out, "admission: max_engine_load %d, max_queued_prefill_tokens %d, fill %g / %g / %g (critical / standard / sheddable), "+
		"queue %d per band, ttl %v (sheddable %v), promote after %v (1 release in %d); "+
		"bands: request i is critical, standard, sheddable for i mod 3\n\n",
		acfg.MaxLoad, acfg.MaxQueuedPrefill, acfg.Bands[admission.Critical].Fill, acfg.Bands[admission.Standard].Fill,
		acfg.Bands[admission.Sheddable].Fill, acfg.Bands[admission.Standard].MaxQueue, acfg.Bands[admission.Standard].TTL,
		acfg.Bands[admission.Sheddable].TTL, acfg.PromoteAfter, acfg.PromoteEvery)

	type variant struct {
		pattern   string
		w         *fleet.Workload
		on, alone bool
	}
	var jobs []simJob
	var ran []variant
	for _, name := range names {
		for _, r := range routers {
			variants := []variant{{"flat", wf, false, false}, {"flat", wf, true, false}, {"burst", wb, false, false}, {"burst", wb, true, false}}
			if r > 1 {
				variants = append(variants, variant{"burst", wb, true, true})
			}
			for _, v := range variants {
				cfg := fleet.Config{Strategy: name, Engines: o.Engines, Routers: r, Engine: ecfg, GossipDelay: o.GossipDelay,
					PeerDelay: o.PeerDelay, Arrival: fleet.RandomArrival, Seed: o.Seed, Isolated: o.Isolated, AloneQueues: v.alone}
				if v.on {
					cfg.Admission = &acfg
				}
				jobs = append(jobs, simJob{cfg: cfg, w: v.w})
				ran = append(ran, v)
			}
		}
	}
	start := time.Now()
	results, err := runAll(ctx, jobs, o.Parallel)
	if err != nil {
		return nil, err
	}
	var rows []BurstRow
	for i, res := range results {
		v := ran[i]
		for b := admission.NumBands - 1; b >= 0; b-- {
			br := res.Bands[b]
			rows = append(rows, BurstRow{Pattern: v.pattern, Strategy: res.Strategy, Routers: res.Routers, Admission: v.on,
				QueuesAlone: v.alone,
				Band:        admission.Band(b).String(), Requests: br.Requests, Served: br.Served, Rejected: br.Rejected,
				Expired: br.Expired, Lost: br.Requests - br.Served - br.Rejected - br.Expired,
				TTFTP50: msOf(br.TTFT.P50), TTFTP90: msOf(br.TTFT.P90), TTFTP99: msOf(br.TTFT.P99),
				WaitP50: msOf(br.Wait.P50), WaitP90: msOf(br.Wait.P90), Admitted: br.Admitted, Overfull: br.Overfull})
		}
	}
	printBurst(out, rows)
	fmt.Fprintf(out, "%d simulations in %v\n", len(jobs), time.Since(start).Round(time.Millisecond))
	return rows, nil
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// printBurst prints the rows grouped by strategy and router count, then
// the acceptance targets of each group (admission as shipped: the
// replicas see each other's waiters).
func printBurst(w io.Writer, rows []BurstRow) {
	for len(rows) > 0 {
		n := 1
		for n < len(rows) && rows[n].Strategy == rows[0].Strategy && rows[n].Routers == rows[0].Routers {
			n++
		}
		group := rows[:n]
		rows = rows[n:]
		fmt.Fprintf(w, "%s, routers=%d\n", group[0].Strategy, group[0].Routers)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "load\tadmission\tband\trequests\tserved\trejected\texpired\tlost\tttft p50\tp90\tp99 ms\tqueued p50\tp90 ms\toverfull\t")
		for _, r := range group {
			on := "off"
			if r.Admission {
				on = "on"
			}
			if r.QueuesAlone {
				on = "on, queues alone"
			}
			over := "-"
			if r.Admitted > 0 {
				over = fmt.Sprintf("%.1f%%", 100*float64(r.Overfull)/float64(r.Admitted))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t\n", r.Pattern, on, r.Band, r.Requests,
				r.Served, r.Rejected, r.Expired, r.Lost, r.TTFTP50, r.TTFTP90, r.TTFTP99, r.WaitP50, r.WaitP90, over)
		}
		tw.Flush()
		find := func(pattern string, on bool, band string) BurstRow {
			for _, r := range group {
				if r.Pattern == pattern && r.Admission == on && !r.QueuesAlone && r.Band == band {
					return r
				}
			}
			return BurstRow{}
		}
		crit, critFlat := find("burst", true, "critical"), find("flat", true, "critical")
		std, stdOff := find("burst", true, "standard"), find("burst", false, "standard")
		lost := 0
		for _, r := range group {
			if r.Admission {
				lost += r.Lost
			}
		}
		verdict := func(ok bool) string {
			if ok {
				return "met"
			}
			return "NOT met"
		}
		fmt.Fprintf(w, "targets (admission on): critical p90 %.0f ms ≤ 2 × flat %.0f ms: %s; standard p90 %.0f ms ≤ ½ × off %.0f ms: %s; lost %d: %s\n\n",
			crit.TTFTP90, critFlat.TTFTP90, verdict(crit.TTFTP90 <= 2*critFlat.TTFTP90),
			std.TTFTP90, stdOff.TTFTP90, verdict(std.TTFTP90 <= stdOff.TTFTP90/2), lost, verdict(lost == 0))
	}
}
