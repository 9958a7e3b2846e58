package routestats

import (
	"sort"
	"time"
)

// Hist is a histogram on the wire: [bucket index, count] pairs, non-zero
// buckets only.
type Hist [][2]uint32

// Bucket is one time slot of one target on one router.
type Bucket struct {
	// Slot is the slot's start as unix time divided by the step.
	Slot     int64  `json:"slot"`
	Attempts uint32 `json:"attempts"`
	Errors   uint32 `json:"errors"`
	Retries  uint32 `json:"retries"`
	// PromptTokens and CachedTokens sum the attempts whose engine reported
	// cached prompt tokens.
	PromptTokens uint64 `json:"prompt_tokens,omitempty"`
	CachedTokens uint64 `json:"cached_tokens,omitempty"`
	Latency      Hist   `json:"latency,omitempty"`
	TTFT         Hist   `json:"ttft,omitempty"`
}

// Target is one target's buckets on one router.
type Target struct {
	Target   string   `json:"target"`
	Provider string   `json:"provider"`
	Fine     []Bucket `json:"fine,omitempty"`
	Coarse   []Bucket `json:"coarse,omitempty"`
}

// Route is one pool's targets on one router.
type Route struct {
	Pool    string   `json:"pool"`
	Targets []Target `json:"targets"`
}

// View is the whole mesh's figures per pool, as GET /api/v1/route-stats
// serves them.
type View struct {
	GeneratedAt time.Time   `json:"generated_at"`
	Routes      []RouteView `json:"routes"`
}

// RouteView is one pool across every reporting router.
type RouteView struct {
	Pool string `json:"pool"`
	// Nodes are the routers whose reports contributed.
	Nodes   []string              `json:"nodes"`
	Windows map[string]WindowView `json:"windows"` // "5m", "60m"
}

// WindowView is a pool over one window. Requests are client requests that
// reached a target (first attempts); Attempts include retries; Errors are
// failed attempts.
type WindowView struct {
	Seconds        int          `json:"seconds"`
	StepSeconds    int          `json:"step_seconds"`
	Requests       uint64       `json:"requests"`
	RequestsPerSec float64      `json:"requests_per_sec"`
	Attempts       uint64       `json:"attempts"`
	Errors         uint64       `json:"errors"`
	Retries        uint64       `json:"retries"`
	ErrorRate      float64      `json:"error_rate"`
	Targets        []TargetView `json:"targets"`
}

// TargetView is one target over one window. Share is its part of the
// pool's attempts; percentiles are in milliseconds (nil: no sample).
type TargetView struct {
	Target     string   `json:"target"`
	Provider   string   `json:"provider"`
	Attempts   uint64   `json:"attempts"`
	Errors     uint64   `json:"errors"`
	Retries    uint64   `json:"retries"`
	Share      float64  `json:"share"`
	ErrorRate  float64  `json:"error_rate"`
	TTFTP50    *float64 `json:"ttft_p50_ms"`
	TTFTP90    *float64 `json:"ttft_p90_ms"`
	LatencyP50 *float64 `json:"latency_p50_ms"`
	LatencyP90 *float64 `json:"latency_p90_ms"`
	// PrefixCacheHitRate is cached ÷ prompt tokens over the attempts whose
	// engine reported cached tokens; nil when none did.
	PrefixCacheHitRate *float64 `json:"prefix_cache_hit_rate"`
	Points             []Point  `json:"points"`
}

// Point is one slot of a target's chart; T is the slot start in unix ms.
type Point struct {
	T          int64    `json:"t"`
	Attempts   uint32   `json:"attempts"`
	Errors     uint32   `json:"errors"`
	LatencyP50 *float64 `json:"latency_p50_ms"`
}

type merged struct {
	attempts, errors, retries uint32
	prompt, cached            uint64
	latency, ttft             hist
}

type window struct {
	name   string
	step   time.Duration
	length int
	pick   func(Target) []Bucket
}

var windows = []window{
	{"5m", FineStep, fineLen, func(t Target) []Bucket { return t.Fine }},
	{"60m", CoarseStep, coarseLen, func(t Target) []Bucket { return t.Coarse }},
}

// Summarize folds every router's report (by node id) into the mesh's view
// at now: buckets of the same slot add up, so shares, rates and
// percentiles are the mesh's, not an average of routers'.
func Summarize(now time.Time, reports map[string][]Route) View {
	type acc struct {
		provider string
		slots    [2]map[int64]*merged // per window
	}
	byPool := map[string]map[string]*acc{}
	nodes := map[string]map[string]bool{}
	for node, routes := range reports {
		for _, r := range routes {
			if nodes[r.Pool] == nil {
				nodes[r.Pool] = map[string]bool{}
				byPool[r.Pool] = map[string]*acc{}
			}
			nodes[r.Pool][node] = true
			for _, t := range r.Targets {
				a := byPool[r.Pool][t.Target]
				if a == nil {
					a = &acc{provider: t.Provider, slots: [2]map[int64]*merged{{}, {}}}
					byPool[r.Pool][t.Target] = a
				}
				for wi, w := range windows {
					for _, b := range w.pick(t) {
						m := a.slots[wi][b.Slot]
						if m == nil {
							m = &merged{}
							a.slots[wi][b.Slot] = m
						}
						m.attempts += b.Attempts
						m.errors += b.Errors
						m.retries += b.Retries
						m.prompt += b.PromptTokens
						m.cached += b.CachedTokens
						m.latency.merge(b.Latency)
						m.ttft.merge(b.TTFT)
					}
				}
			}
		}
	}
	out := View{GeneratedAt: now.UTC(), Routes: []RouteView{}}
	for pool, targets := range byPool {
		rv := RouteView{Pool: pool, Windows: map[string]WindowView{}}
		for n := range nodes[pool] {
			rv.Nodes = append(rv.Nodes, n)
		}
		sort.Strings(rv.Nodes)
		names := make([]string, 0, len(targets))
		for n := range targets {
			names = append(names, n)
		}
		sort.Strings(names)
		for wi, w := range windows {
			current := slotOf(now, w.step)
			first := current - int64(w.length) + 1
			wv := WindowView{Seconds: int(time.Duration(w.length) * w.step / time.Second), StepSeconds: int(w.step / time.Second), Targets: []TargetView{}}
			for _, name := range names {
				a := targets[name]
				tv := TargetView{Target: name, Provider: a.provider, Points: make([]Point, 0, w.length)}
				var lat, ttft hist
				var prompt, cached uint64
				for slot := first; slot <= current; slot++ {
					p := Point{T: slot * int64(w.step) / int64(time.Millisecond)}
					if m := a.slots[wi][slot]; m != nil {
						tv.Attempts += uint64(m.attempts)
						tv.Errors += uint64(m.errors)
						tv.Retries += uint64(m.retries)
						prompt += m.prompt
						cached += m.cached
						for i := range lat {
							lat[i] += m.latency[i]
							ttft[i] += m.ttft[i]
						}
						p.Attempts, p.Errors, p.LatencyP50 = m.attempts, m.errors, m.latency.quantile(0.5)
					}
					tv.Points = append(tv.Points, p)
				}
				tv.TTFTP50, tv.TTFTP90 = ttft.quantile(0.5), ttft.quantile(0.9)
				tv.LatencyP50, tv.LatencyP90 = lat.quantile(0.5), lat.quantile(0.9)
				if tv.Attempts > 0 {
					tv.ErrorRate = float64(tv.Errors) / float64(tv.Attempts)
				}
				if prompt > 0 {
					hit := float64(cached) / float64(prompt)
					tv.PrefixCacheHitRate = &hit
				}
				wv.Attempts += tv.Attempts
				wv.Errors += tv.Errors
				wv.Retries += tv.Retries
				wv.Targets = append(wv.Targets, tv)
			}
			for i := range wv.Targets {
				if wv.Attempts > 0 {
					wv.Targets[i].Share = float64(wv.Targets[i].Attempts) / float64(wv.Attempts)
				}
			}
			wv.Requests = wv.Attempts - wv.Retries
			wv.RequestsPerSec = float64(wv.Requests) / float64(wv.Seconds)
			if wv.Attempts > 0 {
				wv.ErrorRate = float64(wv.Errors) / float64(wv.Attempts)
			}
			rv.Windows[w.name] = wv
		}
		out.Routes = append(out.Routes, rv)
	}
	sort.Slice(out.Routes, func(i, j int) bool { return out.Routes[i].Pool < out.Routes[j].Pool })
	return out
}
