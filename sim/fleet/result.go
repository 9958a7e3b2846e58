package fleet

import (
	"slices"
	"strconv"
	"time"

	"github.com/rolter/rolter/router/admission"
)

func (r *run) result() Result {
	res := Result{Strategy: r.cfg.Strategy, Routers: r.cfg.Routers, Requests: len(r.flights),
		PerEngine: make([]int, len(r.engines))}
	var ttft, e2e []time.Duration
	var out int
	res.Timings = make([]Timing, len(r.flights))
	for i := range res.Timings {
		res.Timings[i].Engine = -1
	}
	for _, d := range r.done {
		c := d.c
		if i, err := strconv.Atoi(c.ID); err == nil && i >= 0 && i < len(res.Timings) {
			res.Timings[i] = Timing{Engine: d.f.engine, Arrival: c.Arrival, FirstToken: c.FirstToken, Finish: c.Finish,
				CachedTokens: c.CachedTokens}
		}
		// From the request's arrival at its router: a hold before the
		// pick too.
		var held time.Duration
		if i, err := strconv.Atoi(c.ID); err == nil && r.waited != nil && i >= 0 && i < len(r.waited) {
			held = r.waited[i]
			res.Held += held
		}
		ttft = append(ttft, c.TTFT()+held)
		e2e = append(e2e, c.Latency()+held)
		res.PromptTokens += c.PromptTokens
		res.CachedTokens += c.CachedTokens
		res.Preemptions += c.Preemptions
		out += c.OutputTokens
		res.PerEngine[d.f.engine]++
	}
	var bandTTFT, bandWait [admission.NumBands][]time.Duration
	for i := range r.flights {
		b := r.w.reqs[i].Band
		res.Bands[b].Requests++
		switch r.fates[i] {
		case rejected:
			res.Bands[b].Rejected++
		case expired:
			res.Bands[b].Expired++
		}
	}
	for _, d := range r.done {
		i, err := strconv.Atoi(d.c.ID)
		if err != nil {
			continue
		}
		b := r.w.reqs[i].Band
		res.Bands[b].Served++
		// From the client's arrival: the wait in the router's queue too.
		bandTTFT[b] = append(bandTTFT[b], d.c.FirstToken-r.arrived[i])
		bandWait[b] = append(bandWait[b], d.c.Arrival-r.arrived[i])
	}
	for b := range res.Bands {
		res.Bands[b].TTFT = percentiles(bandTTFT[b])
		res.Bands[b].Wait = percentiles(bandWait[b])
		if r.adm != nil {
			res.Bands[b].Admitted, res.Bands[b].Overfull = r.adm.bands[b].Admitted, r.adm.bands[b].Overfull
		}
	}
	res.Failed = len(r.flights) - len(r.done)
	if res.PromptTokens > 0 {
		res.HitRate = float64(res.CachedTokens) / float64(res.PromptTokens)
	}
	res.TTFT = percentiles(ttft)
	res.E2E = percentiles(e2e)
	res.Duration = r.maxEnd
	if r.maxEnd > 0 {
		res.Throughput = float64(out) / r.maxEnd.Seconds()
	}
	res.Imbalance = imbalance(res.PerEngine)
	return res
}

// imbalance is max over mean of per-engine counts (1 = perfectly even).
func imbalance(counts []int) float64 {
	total, most := 0, 0
	for _, c := range counts {
		total += c
		most = max(most, c)
	}
	if total == 0 {
		return 0
	}
	return float64(most) * float64(len(counts)) / float64(total)
}

// percentiles uses the nearest-rank method.
func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return Percentiles{P50: at(0.50), P90: at(0.90), P99: at(0.99)}
}
