package overhead

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// newClient is the open-streams mode's client (streams.go).
func newClient() *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        8192,
			MaxIdleConnsPerHost: 8192,
			MaxConnsPerHost:     1024, // beyond this requests queue in the client, and that wait counts
			IdleConnTimeout:     60 * time.Second,
			DisableCompression:  true,
		},
	}
}

// request is what the generator sends: the same body every time.
type request struct {
	path   string
	body   []byte
	stream bool // the answer must be an event stream, else JSON
}

// benchRequest is a chat request with a PromptWords-word user message, or
// with cfg.PromptTokens > 0 a completions request whose prompt is that many
// token ids (one fixed sequence: precise_cache_aware sees it resident).
func benchRequest(cfg Config, stream bool) request {
	if cfg.PromptTokens > 0 {
		b := fmt.Appendf(nil, `{"model":%q,"prompt":[`, model)
		for i := range cfg.PromptTokens {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(i*7919%128000), 10)
		}
		b = fmt.Appendf(b, `],"max_tokens":%d,"stream":%t}`, cfg.MaxTokens, stream)
		return request{path: "/v1/completions", body: b, stream: stream}
	}
	var w strings.Builder
	for i := range cfg.PromptWords {
		w.WriteString("word")
		w.WriteString(strconv.Itoa(i))
		w.WriteByte(' ')
	}
	return request{path: "/v1/chat/completions", stream: stream, body: fmt.Appendf(nil,
		`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":%d,"stream":%t}`, model, w.String(), cfg.MaxTokens, stream)}
}

// loadStats summarises one open-loop run.
type loadStats struct {
	sent, errors   int
	p50, p99, p999 time.Duration
	behind         time.Duration   // how late the generator ran at worst
	lat            []time.Duration // every request's latency, sorted
}

// sustained reports whether the run kept p99 under limit with fewer than
// 0.1% errors.
func (s loadStats) sustained(limit time.Duration) bool {
	return s.sent > 0 && s.p99 < limit && s.errors*1000 < s.sent
}

// generator is the open loop's HTTP client: fasthttp's, which does a
// request on the goroutine that asks for it over a pooled keep-alive
// connection and reads the whole answer (a chunked stream to its last
// chunk) into a reused buffer, with no goroutine per connection and
// no header map per answer as net/http's has. It shares a CPU with the
// engine, and what the two use per request bounds direct's max rate
// (BENCHMARKS.md §2).
type generator struct {
	c       *fasthttp.Client
	timeout time.Duration // a failed request's latency
}

// maxConns bounds one generator's connections, over all its hosts:
// beyond it requests queue in the client, and that wait counts. Per host
// it would be 64 times as many at 64 targets direct, and a one-second
// stall at 14 000 requests/s opened enough of them, and the engine's
// ends, to use up this process's 20 000 file descriptors.
const maxConns = 1024

// newGenerator returns a generator for requests spread over hosts
// addresses.
func newGenerator(hosts int) *generator {
	const timeout = 10 * time.Second
	return &generator{timeout: timeout, c: &fasthttp.Client{
		MaxConnsPerHost:          max(maxConns/max(hosts, 1), 1),
		MaxConnWaitTimeout:       timeout,
		ReadTimeout:              timeout,
		WriteTimeout:             timeout,
		MaxIdleConnDuration:      time.Minute,
		NoDefaultUserAgentHeader: true,
	}}
}

func (g *generator) close() { g.c.CloseIdleConnections() }

// openLoop sends rate requests per second for dur, each at its scheduled
// time whatever happened to the earlier ones (no coordinated omission),
// and measures each request's latency from its scheduled send time to the
// end of its response body. A failed request counts as an error and as a
// latency of the client timeout. It waits for each scheduled time on a
// pacer, not time.Sleep, whose millisecond wake-ups would be most of a
// fast path's latency.
func openLoop(ctx context.Context, g *generator, base func(int) string, rq request, rate float64, dur time.Duration) loadStats {
	n := max(int(rate*dur.Seconds()), 1)
	interval := time.Duration(float64(time.Second) / rate)
	lat := make([]time.Duration, n)
	failed := make([]bool, n)
	var wg sync.WaitGroup
	p := newPacer()
	defer p.close()
	start := time.Now()
	var behind time.Duration
	for i := 0; i < n && ctx.Err() == nil; i++ {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			p.sleep(d)
		} else {
			behind = max(behind, -d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat[i], failed[i] = g.send(base(i), rq, at)
		}()
	}
	wg.Wait()
	s := loadStats{sent: n, behind: behind, lat: lat}
	for i := range failed {
		if failed[i] {
			s.errors++
			lat[i] = g.timeout
		}
	}
	s.summarise()
	return s
}

var eventStream = []byte("text/event-stream")

// send posts rq to base and reads the whole answer, and returns its
// latency from at. An answer that is not 200, or not an event stream
// when one was asked for (and the other way round), is a failure: a
// proxy or engine that answered the wrong mode must not pass for a
// cheap one.
func (g *generator) send(base string, rq request, at time.Time) (time.Duration, bool) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(base + rq.path)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetBodyRaw(rq.body)
	err := g.c.Do(req, resp)
	d := time.Since(at)
	if err != nil {
		return d, true
	}
	sse := bytes.HasPrefix(resp.Header.ContentType(), eventStream)
	return d, resp.StatusCode() != fasthttp.StatusOK || sse != rq.stream
}

// summarise sorts s.lat and sets the percentiles from it.
func (s *loadStats) summarise() {
	slices.Sort(s.lat)
	n := len(s.lat)
	if n == 0 {
		return
	}
	q := func(p float64) time.Duration { return s.lat[min(int(p*float64(n)), n-1)] }
	s.p50, s.p99, s.p999 = q(0.50), q(0.99), q(0.999)
}

// pool merges the runs of one cell: their requests' latencies make one
// distribution.
func pool(runs []loadStats) loadStats {
	var s loadStats
	for _, r := range runs {
		s.sent += r.sent
		s.errors += r.errors
		s.behind = max(s.behind, r.behind)
		s.lat = append(s.lat, r.lat...)
	}
	s.summarise()
	return s
}

// sendStream is the open-streams mode's request (streams.go), on
// net/http's client, whose context ends a stream that is held open: it
// posts rq to base and reads every SSE event. An answer that is not 200,
// or not an event stream when one was asked for (and the other way
// round), is a failure.
func sendStream(ctx context.Context, client *http.Client, base string, rq request, at time.Time) (time.Duration, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+rq.path, bytes.NewReader(rq.body))
	if err != nil {
		return 0, true
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, true
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, true
	}
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	return time.Since(at), resp.StatusCode != http.StatusOK || sse != rq.stream
}
