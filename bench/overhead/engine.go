package overhead

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/rolter/rolter/sim"
)

// The engines the benchmark can put behind the proxies (Config.Engine).
const (
	// EngineCanned answers every generation request with the sim's own
	// answer to the benchmark's request, recorded once at start: it reads
	// the request body to its end and decodes none of it, so the engine's
	// cost, on the generator's CPU, is the same small amount for a
	// 64-word chat and a 100 000-token prompt, and direct's latency is
	// steady enough to subtract from the proxy's.
	EngineCanned = "canned"
	// EngineSim runs the instant-mode sim for every request: JSON decode,
	// tokenizer, scheduler.
	EngineSim = "sim"
)

// simModelLen is the benchmark sim's model length in tokens; its default
// KV cache (28 000 blocks of 16 tokens) holds two 100 000-word chats.
const simModelLen = 1 << 18

// startEngine runs the engine cfg.Engine names serving n loopback ports
// until ctx ends, and returns their addresses. Every path but the two
// generation endpoints (models, health, metrics, tokenize) is the sim's.
// The canned engine is served by fasthttp's server, whose request costs
// the generator's CPU a fraction of net/http's (BENCHMARKS.md §2): the
// CPU it shares with the generator is what limits direct's max rate.
func startEngine(ctx context.Context, cfg Config, n int) ([]string, error) {
	sc := sim.DefaultConfig()
	sc.Model = model
	sc.Engine.Instant = true
	// Long-prompt runs must be answered, not refused: a 100 000-word
	// chat is about 190 000 of the sim's tokens, past the default
	// 131 072-token model length.
	sc.Engine.MaxModelLen = simModelLen
	s := sim.New(sc, slog.New(slog.DiscardHandler), nil, nil)
	go s.Run(ctx)
	h := fasthttpadaptor.NewFastHTTPHandler(s.Handler())
	if cfg.Engine == EngineCanned {
		c, err := record(ctx, s.Handler(), cfg)
		if err != nil {
			return nil, err
		}
		c.next, c.done = h, ctx.Done()
		h = c.serve
	}
	return listen(ctx, h, n)
}

// listen serves h on n loopback ports until ctx ends, each with its own
// fasthttp server, and returns their addresses.
func listen(ctx context.Context, h fasthttp.RequestHandler, n int) ([]string, error) {
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("bench overhead: engine listen: %w", err)
		}
		srv := &fasthttp.Server{Handler: h, ReadTimeout: time.Minute, IdleTimeout: time.Minute,
			MaxRequestBodySize: maxEngineBody, NoDefaultServerHeader: true, NoDefaultContentType: true}
		go func() { _ = srv.Serve(patientListener{Listener: ln, done: ctx.Done()}) }()
		go func() {
			<-ctx.Done()
			_ = ln.Close()
			_ = srv.Shutdown()
		}()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// patientListener retries an accept that failed for want of a file
// descriptor, after a pause, as net/http's server does: fasthttp's Serve
// returns on any accept error but a timeout, and the engine's port would
// stay dead for the rest of the run.
type patientListener struct {
	net.Listener
	done <-chan struct{}
}

func (l patientListener) Accept() (net.Conn, error) {
	pause := 5 * time.Millisecond
	for {
		c, err := l.Listener.Accept()
		if err == nil || !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
			return c, err
		}
		select {
		case <-l.done:
			return nil, err
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// maxEngineBody bounds a request body the engine reads: ten times the
// longest prompt the benchmark sends (100 000 token ids, about 700 KB).
const maxEngineBody = 64 << 20

// canned is EngineCanned: the sim's answers replayed.
type canned struct {
	next          fasthttp.RequestHandler // the sim, for every path but generation
	done          <-chan struct{}         // the engine's end: a stream's pause stops
	plain, stream answer
	// gap is the pause between a stream's token events (0: none, as the
	// instant sim); the open-streams mode uses it to keep streams open.
	gap time.Duration
}

// answer is one recorded response: its headers and its body, split into
// SSE events for a stream (each written and flushed on its own, as the
// sim does) or whole.
type answer struct {
	header http.Header
	parts  [][]byte
}

// record asks the sim h for its plain and streamed answer to the
// benchmark's request and returns the engine that replays them.
func record(ctx context.Context, h http.Handler, cfg Config) (*canned, error) {
	c := &canned{}
	rc := cfg
	if cfg.Streams > 0 {
		c.gap, rc.MaxTokens = cfg.StreamGap, cfg.StreamTokens
	}
	for _, stream := range []bool{false, true} {
		rq := benchRequest(rc, stream)
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, rq.path, bytes.NewReader(rq.body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			return nil, fmt.Errorf("bench overhead: the sim answered the benchmark's request %d: %.200s", rec.Code, rec.Body.Bytes())
		}
		a := answer{header: rec.Header().Clone()}
		a.header.Del("Content-Length")
		body := rec.Body.Bytes()
		if !stream {
			a.parts = [][]byte{body}
			c.plain = a
			continue
		}
		for len(body) > 0 {
			i := bytes.Index(body, []byte("\n\n"))
			if i < 0 {
				i = len(body) - 2
			}
			a.parts = append(a.parts, body[:i+2])
			body = body[i+2:]
		}
		c.stream = a
	}
	return c, nil
}

// streamFlag is how the benchmark's request bodies end when streaming;
// the proxies pass the body on unchanged, so the engine reads the mode
// from the body's last bytes instead of decoding it.
var streamFlag = []byte(`"stream":true}`)

// serve answers a generation request with the recorded answer of the
// mode its body ends with; a stream is chunked, one chunk written and
// flushed per event (events.Read).
func (c *canned) serve(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	if !ctx.IsPost() || (path != "/v1/chat/completions" && path != "/v1/completions") {
		c.next(ctx)
		return
	}
	stream := bytes.HasSuffix(ctx.PostBody(), streamFlag)
	a := c.plain
	if stream {
		a = c.stream
	}
	for k, vs := range a.header {
		for _, v := range vs {
			ctx.Response.Header.Add(k, v)
		}
	}
	if !stream {
		ctx.SetBody(a.parts[0])
		return
	}
	ctx.SetBodyStream(&events{parts: a.parts, gap: c.gap, done: c.done}, -1)
}

// events is a stream's body: each Read returns (the rest of) one event,
// which fasthttp's server writes as one chunk and flushes, after the
// gap for every event but the first.
type events struct {
	parts [][]byte
	next  int // the event being written
	off   int // how much of it was written
	gap   time.Duration
	done  <-chan struct{}
	timer *time.Timer
}

// errEngineDone ends a stream whose pause outlasted the engine.
var errEngineDone = errors.New("bench overhead: engine stopped")

func (e *events) Read(p []byte) (int, error) {
	if e.next == len(e.parts) {
		return 0, io.EOF
	}
	if e.off == 0 && e.next > 0 && e.gap > 0 {
		if e.timer == nil {
			e.timer = time.NewTimer(e.gap)
		} else {
			e.timer.Reset(e.gap)
		}
		select {
		case <-e.done:
			e.timer.Stop()
			return 0, errEngineDone
		case <-e.timer.C:
		}
	}
	n := copy(p, e.parts[e.next][e.off:])
	if e.off += n; e.off == len(e.parts[e.next]) {
		e.next, e.off = e.next+1, 0
	}
	return n, nil
}
