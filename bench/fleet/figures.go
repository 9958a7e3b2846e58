package fleet

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"
)

// Figures are one run's headline numbers, in engine time.
type Figures struct {
	HitRate float64 `json:"hit_rate"`
	TTFTP50 float64 `json:"ttft_p50_ms"`
	TTFTP90 float64 `json:"ttft_p90_ms"`
	E2EP50  float64 `json:"e2e_p50_ms"`
	E2EP90  float64 `json:"e2e_p90_ms"`
	// PerEngine is the requests each engine completed.
	PerEngine []int `json:"per_engine_requests"`
}

// Row is one (strategy, routers) of the report.
type Row struct {
	Strategy  string  `json:"strategy"`
	Routers   int     `json:"routers"`
	Measured  Figures `json:"measured"`
	Predicted Figures `json:"predicted"`
	// Requests were sent, Failed of them got no complete answer.
	Requests int `json:"requests"`
	Failed   int `json:"failed"`
	// ClientTTFTMean is the measured mean TTFT at the client and
	// EngineTTFTMean the engines' own (vllm:time_to_first_token_seconds):
	// the difference is what the HTTP path between them adds.
	ClientTTFTMean float64 `json:"client_ttft_mean_ms"`
	EngineTTFTMean float64 `json:"engine_ttft_mean_ms"`
	// Client is Measured with TTFT and latency as the client saw them,
	// multiplied by the speed (Measured itself with Config.ClientClock).
	Client Figures `json:"client"`
	// RequestPath is the mean time from the client's send to the engine's
	// receipt (client, router, sim server), in engine ms: what
	// Config.ClientClock keeps out of the engines' queues.
	RequestPath float64 `json:"request_path_mean_ms"`
	// LateP99 is the 99th percentile of how late the replay sent a request
	// after its scheduled time, in engine ms.
	LateP99 float64 `json:"send_late_p99_ms"`
	// GossipDelay is the engine-state age the prediction assumed.
	GossipDelay time.Duration `json:"gossip_delay_ns"`
	// ResidencyDelay is the prefix-residency age the prediction assumed.
	ResidencyDelay time.Duration `json:"kv_delay_ns"`
	// PeerDelay is the router-to-router delay the prediction assumed.
	PeerDelay time.Duration `json:"peer_delay_ns"`
	// Wall is how long the measured run took, fleet start to stop.
	Wall time.Duration `json:"wall_ns"`
}

// Agreement bounds: the simulator agrees with the processes when the
// hit rate is within HitTolerance and both TTFT percentiles within
// TTFTTolerance of the measurement, relative to the prediction.
const (
	HitTolerance  = 0.15
	TTFTTolerance = 0.25
)

// relErr is |measured − predicted| / predicted (0 when both are 0).
func relErr(measured, predicted float64) float64 {
	if predicted == 0 {
		if measured == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return math.Abs(measured-predicted) / predicted
}

// Deviation is the relative error of the hit rate, TTFT p50 and p90.
func (r Row) Deviation() (hit, p50, p90 float64) {
	return relErr(r.Measured.HitRate, r.Predicted.HitRate), relErr(r.Measured.TTFTP50, r.Predicted.TTFTP50),
		relErr(r.Measured.TTFTP90, r.Predicted.TTFTP90)
}

// Agrees reports whether the row is within the agreement bounds.
func (r Row) Agrees() bool {
	hit, p50, p90 := r.Deviation()
	return hit <= HitTolerance && p50 <= TTFTTolerance && p90 <= TTFTTolerance
}

// Print writes the rows as a table: measured beside predicted, the
// deviations, and "path ms": the mean time from a client's send to its
// request reaching the engine (client, router, sim server and the
// machine's scheduling on loopback), in engine time.
func Print(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\trouters\t| measured hit%\tttft p50\tp90 ms\te2e p50\tp90 ms\t"+
		"| predicted hit%\tttft p50\tp90 ms\te2e p50\tp90 ms\t| Δhit\tΔp50\tΔp90\tagree\t| path ms\tlate p99\tfailed\t")
	for _, r := range rows {
		hit, p50, p90 := r.Deviation()
		agree := "no"
		if r.Agrees() {
			agree = "yes"
		}
		m, p := r.Measured, r.Predicted
		fmt.Fprintf(tw, "%s\t%d\t| %.1f\t%.0f\t%.0f\t%.0f\t%.0f\t| %.1f\t%.0f\t%.0f\t%.0f\t%.0f\t| %s\t%s\t%s\t%s\t| %.0f\t%.0f\t%d\t\n",
			r.Strategy, r.Routers, 100*m.HitRate, m.TTFTP50, m.TTFTP90, m.E2EP50, m.E2EP90,
			100*p.HitRate, p.TTFTP50, p.TTFTP90, p.E2EP50, p.E2EP90,
			pct(hit), pct(p50), pct(p90), agree, r.RequestPath, r.LateP99, r.Failed)
	}
	tw.Flush()
}

func pct(v float64) string {
	if math.IsInf(v, 0) {
		return "inf"
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}

// percentile is the nearest-rank q-quantile of ds, in milliseconds.
func percentile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return ms(s[min(max(i, 0), len(s)-1)])
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mean(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return ms(sum) / float64(len(ds))
}
