package router

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkRequestSide is the request's side alone, up to the body the
// upstream write would send: authentication, the body's read, validation,
// the model's resolve, the prompt's read into the RouteContext, the pick
// (loads, eligibility, the strategy) and the upstream body, under
// round_robin and precise_cache_aware over 1 and 64 targets. Each op
// includes building the httptest request and recorder, the same for every
// case.
func BenchmarkRequestSide(b *testing.B) {
	body := strings.Replace(benchBody, "%s", "false", 1)
	for _, strategy := range []string{"round_robin", "precise_cache_aware"} {
		for _, n := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/%d", strategy, n), func(b *testing.B) {
				s := benchServerFrom(b, memEngine{}, strategyBenchConfig(strategy, n))
				sn := s.snap.Load()
				b.ReportAllocs()
				for b.Loop() {
					w := httptest.NewRecorder()
					f := &stdFront{w: w, r: httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)),
						ctl: *http.NewResponseController(w)}
					a := &attempt{s: s, sn: sn, w: f, r: f, start: s.clock.Now()}
					a.req, a.rc = &a.reqv, &a.rcv
					a.begin()
					if _, ok := a.accept(); !ok {
						b.Fatalf("refused: %d %s", a.code, w.Body)
					}
					a.sizeTargets()
					idx, ok := a.pick(false)
					if !ok {
						b.Fatal("no pick")
					}
					t := &a.res.pool.targets[idx]
					if up := a.upstreamBody(t, t.upstreamModel(a.res.requested)); up.n == 0 {
						b.Fatal("empty upstream body")
					}
					a.body.recycle(a.req, a.rc)
					a.body.release()
					a.releaseTargets()
				}
			})
		}
	}
}
