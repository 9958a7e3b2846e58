package strategies

import (
	"slices"
	"testing"
	"time"
)

// herdRun replays a steady stream of requests through lb in front of n
// identical single-server FIFO targets, in virtual time, the way the router
// drives a balancer: loads are the router's in-flight counts, Begin at the
// pick, End (with the queue depth read at Begin) when the response
// completes. Service times vary per request (seeded), so the learned
// latencies of identical targets differ by noise, as real LLM latencies
// differ by output length. It returns each target's share of the requests
// and the requests' latencies.
func herdRun(t *testing.T, name string, n, requests int, gap time.Duration, service func(r Rand) time.Duration) (shares []float64, lat []time.Duration) {
	t.Helper()
	tr := NewTracker()
	ts := targets(n)
	lb := mustBuild(t, name, Spec{Targets: ts, Tracker: tr, Rand: NewRand(3)})
	stats := make([]*TargetStats, n)
	for i := range stats {
		stats[i] = tr.Target(ts[i].ID)
	}
	type pending struct {
		target     int
		sent, done time.Duration
		queue      uint64
		tokens     int
	}
	var out []pending
	free := make([]time.Duration, n) // when each server next idles
	counts := make([]int, n)
	loads := make([]uint64, n)
	r := NewRand(11)
	epoch := time.Unix(1_700_000_000, 0)
	for i := range requests {
		now := time.Duration(i) * gap
		// Completions up to now, in completion order.
		slices.SortFunc(out, func(a, b pending) int { return int(a.done - b.done) })
		k := 0
		for k < len(out) && out[k].done <= now {
			p := out[k]
			stats[p.target].End(Outcome{Success: true, Latency: p.done - p.sent, QueueDepth: p.queue,
				PromptTokens: p.tokens, At: epoch.Add(p.done)})
			lat = append(lat, p.done-p.sent)
			k++
		}
		out = out[k:]
		for j := range loads {
			loads[j] = stats[j].InFlight()
		}
		tokens := 500 + r.IntN(4000)
		ctx := &RouteContext{PromptTokens: tokens}
		tgt := pickOK(t, lb, ctx, loads, nil)
		lb.Observe(tgt, ctx)
		q := stats[tgt].Begin()
		service := service(r)
		start := max(now, free[tgt])
		free[tgt] = start + service
		out = append(out, pending{target: tgt, sent: now, done: free[tgt], queue: q, tokens: tokens})
		counts[tgt]++
	}
	for _, p := range out {
		lat = append(lat, p.done-p.sent)
	}
	for _, c := range counts {
		shares = append(shares, float64(c)/float64(requests))
	}
	return shares, lat
}

// TestLatencyStrategiesDoNotHerd reproduces the pile-up seen in the fleet
// benchmark (fastest and predicted_latency sending most requests to the
// one target that looked fastest, TTFT p90 of minutes) on identical
// targets at two-thirds load. Learned latency arrives only when requests
// complete, so a strategy that trusts it alone keeps sending to the target
// that last looked fastest; and a predicted_latency target that has not
// yet reached 8 successes must not be starved of the traffic it needs to
// get there. No target may take more than twice its fair share, and the
// latency p90 must stay within 1.5 × round_robin's.
func TestLatencyStrategiesDoNotHerd(t *testing.T) {
	heavy := func(r Rand) time.Duration { // one request in five runs 8 × longer
		d := uniformService(r)
		if r.IntN(5) == 0 {
			d *= 8
		}
		return d
	}
	scenarios := []struct {
		name    string
		n       int
		service func(Rand) time.Duration
		mean    time.Duration
	}{
		{"4 targets, uniform service", 4, uniformService, 400 * time.Millisecond},
		{"8 targets, heavy tail", 8, heavy, 960 * time.Millisecond},
	}
	const requests = 1500
	for _, sc := range scenarios {
		gap := time.Duration(float64(sc.mean) / float64(sc.n) / 0.67)
		_, rrLat := herdRun(t, "round_robin", sc.n, requests, gap, sc.service)
		rrP90 := pct(rrLat, 0.9)
		for _, name := range []string{"fastest", "predicted_latency"} {
			t.Run(sc.name+"/"+name, func(t *testing.T) {
				shares, lat := herdRun(t, name, sc.n, requests, gap, sc.service)
				for i, s := range shares {
					if s > 2/float64(sc.n) {
						t.Errorf("target %d got %.0f%% of the requests, want ≤ %.0f%% (shares %.2f)", i, 100*s, 200/float64(sc.n), shares)
					}
				}
				if p90 := pct(lat, 0.9); float64(p90) > 1.5*float64(rrP90) {
					t.Errorf("latency p90 %v, want ≤ 1.5 × round_robin's %v", p90, rrP90)
				}
			})
		}
	}
}

func pct(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func uniformService(r Rand) time.Duration {
	return 100*time.Millisecond + time.Duration(r.IntN(600))*time.Millisecond
}
