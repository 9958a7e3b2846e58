package overhead

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

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
	var h http.Handler = s.Handler()
	if cfg.Engine == EngineCanned {
		c, err := record(ctx, h, cfg)
		if err != nil {
			return nil, err
		}
		h = c
	}
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("bench overhead: engine listen: %w", err)
		}
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		go func() {
			<-ctx.Done()
			_ = hs.Close()
		}()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// canned is EngineCanned: the sim's answers replayed.
type canned struct {
	next          http.Handler // the sim, for every path but generation
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
	c := &canned{next: h}
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

func (c *canned) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || (r.URL.Path != "/v1/chat/completions" && r.URL.Path != "/v1/completions") {
		c.next.ServeHTTP(w, r)
		return
	}
	stream, err := readTail(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	a := c.plain
	if stream {
		a = c.stream
	}
	for k, v := range a.header {
		w.Header()[k] = v
	}
	if !stream {
		w.Header().Set("Content-Length", fmt.Sprint(len(a.parts[0])))
		_, _ = w.Write(a.parts[0])
		return
	}
	fl, _ := w.(http.Flusher)
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush()
	}
	var t *time.Timer
	for i, p := range a.parts {
		if c.gap > 0 && i > 0 {
			if t == nil {
				t = time.NewTimer(c.gap)
			} else {
				t.Reset(c.gap)
			}
			select {
			case <-r.Context().Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		if _, err := w.Write(p); err != nil {
			return
		}
		if fl != nil {
			fl.Flush()
		}
	}
}

var bodyBufs = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// readTail reads body to its end and reports whether it ends with
// streamFlag.
func readTail(body io.Reader) (stream bool, err error) {
	buf := bodyBufs.Get().(*[32 << 10]byte)
	defer bodyBufs.Put(buf)
	var tail []byte
	for {
		n, err := body.Read(buf[:])
		if n > 0 {
			if n >= len(streamFlag) {
				tail = append(tail[:0], buf[n-len(streamFlag):n]...)
			} else {
				tail = append(tail, buf[:n]...)
				if len(tail) > len(streamFlag) {
					tail = tail[len(tail)-len(streamFlag):]
				}
			}
		}
		if err == io.EOF {
			return bytes.Equal(tail, streamFlag), nil
		}
		if err != nil {
			return false, err
		}
	}
}
