package router

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/rolter/rolter/internal/testwait"
)

// heldLog is a log handler that holds each "request" line until the
// test lets it through: the request's end (settle) waits in it.
type heldLog struct {
	logged  chan int // the status of each request line, as it arrives
	release chan struct{}
}

func newHeldLog() *heldLog {
	return &heldLog{logged: make(chan int, 4), release: make(chan struct{})}
}

func (h *heldLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *heldLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *heldLog) WithGroup(string) slog.Handler            { return h }

func (h *heldLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "request" {
		return nil
	}
	code := 0
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "status" {
			code = int(a.Value.Int64())
		}
		return true
	})
	h.logged <- code
	<-h.release
	return nil
}

// On fasthttp's front the client has the whole answer, plain or streamed,
// before the request's log line is written (the request's metrics,
// trace, leg end and log are settled after the answer is flushed), and a
// pipelined next request is answered once that is done. A log line that
// held the answer back would leave the client's read waiting for the
// line the test holds: the read's deadline fails it.
func TestFastAnswerLeavesBeforeItsRequestIsSettled(t *testing.T) {
	for _, tc := range []struct {
		name   string
		engine func(http.ResponseWriter, *http.Request, map[string]any)
		stream bool
	}{
		{"plain", okChat, false},
		{"stream", streamWithUsage, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := newEngine(t, tc.engine)
			held := newHeldLog()
			f := fronts[1].serveFront(t, providers("a", eng.URL)+route("round_robin")+"\n[observability]\nrequest_log = true\n",
				func(o *Options) { o.Logger = slog.New(held) }, nil, nil)
			t.Cleanup(func() { close(held.release) })

			c, err := net.Dial("tcp", strings.TrimPrefix(f.base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			body := fmt.Sprintf(`{"model":"m","stream":%t,"messages":[{"role":"user","content":"hi"}]}`, tc.stream)
			req := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			// Two requests pipelined: the second is read after the first settled.
			if _, err := io.WriteString(c, req+req); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			read := func(what string) string {
				t.Helper()
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: status %d, %v: %s", what, resp.StatusCode, err, b)
				}
				return string(b)
			}
			first := read("the first answer, its request's log line held")
			if tc.stream && !strings.Contains(first, "[DONE]") || !tc.stream && !strings.Contains(first, `"chat.completion"`) {
				t.Fatalf("first answer incomplete: %q", first)
			}
			if code := <-held.logged; code != http.StatusOK {
				t.Fatalf("first request logged with status %d", code)
			}
			held.release <- struct{}{}
			read("the pipelined second answer")
			if code := <-held.logged; code != http.StatusOK {
				t.Fatalf("second request logged with status %d", code)
			}
			held.release <- struct{}{}
		})
	}
}

// stageCounts is how many observations each stage's histogram holds.
func stageCounts(t *testing.T, s *Server) map[string]uint64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() == "rolter_router_stage_seconds" {
			for _, m := range mf.GetMetric() {
				out[labelValue(m)] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	return out
}

// The stage timings of a request are observed once its answer is out,
// but an open stream's do not wait for its end: once its first event
// reached the client, the stages up to its first byte are recorded while
// it is still open. Both fronts, a stream that may be resumed too.
func TestOpenStreamStagesAreRecordedAtItsFirstEvent(t *testing.T) {
	for _, c := range []struct{ name, conf string }{{"", ""}, {"/resumable", "\n[retry]\nresume_streams = true\n"}} {
		for _, fr := range fronts {
			t.Run(fr.name+c.name, func(t *testing.T) { openStreamStages(t, fr, c.conf) })
		}
	}
}

func openStreamStages(t *testing.T, fr front, conf string) {
	eng, gone := holdingEngine(t)
	f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin")+conf, nil, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.base+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.Contains(line, "Hello") {
		t.Fatalf("first event %q, %v", line, err)
	}
	testwait.For(t, 5*time.Second, "the open stream's stages observed", func() bool {
		c := stageCounts(t, f.srv)
		return c["body_read"] == 1 && c["parse"] == 1 && c["route_resolve"] == 1 && c["pick"] == 1 && c["ttfb"] == 1
	})
	if c := stageCounts(t, f.srv); c["relay"] != 0 {
		t.Fatalf("relay observed %d times while the stream is open", c["relay"])
	}
	cancel()
	waitOn(t, gone, "the engine's request ended")
}

// heldSpans holds the end of each span of one name until the test lets
// it through: the request's settle waits in it (its leg's end ends the
// "attempt" span).
type heldSpans struct {
	name    string
	ended   chan struct{}
	release chan struct{}
}

func (h *heldSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (h *heldSpans) Shutdown(context.Context) error                  { return nil }
func (h *heldSpans) ForceFlush(context.Context) error                { return nil }

func (h *heldSpans) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.Name() == h.name {
		h.ended <- struct{}{}
		<-h.release
	}
}

// A key at its max_streams_per_key gets its stream back before the
// stream's last bytes reach it: once the client read a stream to its end
// it may open the next one on another connection at once, even while the
// first request's end (its leg's span, held here) is still being
// recorded.
func TestAKeysStreamIsBackWhenItsAnswerEnds(t *testing.T) {
	eng := newEngine(t, streamWithUsage)
	held := &heldSpans{name: "attempt", ended: make(chan struct{}, 2), release: make(chan struct{})}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(held))
	f := fronts[1].serveFront(t, providers("a", eng.URL)+route("round_robin")+`
[[keys]]
name = "k"
sha256 = "`+sha("sk-k")+`"
[limits]
max_streams_per_key = 1
`, func(o *Options) { o.TracerProvider = tp }, nil, nil)
	t.Cleanup(func() { close(held.release) })
	stream := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	if code, _, body := f.post(t.Context(), stream, "Authorization", "Bearer sk-k"); code != http.StatusOK || !strings.Contains(body, "[DONE]") {
		t.Fatalf("first stream: %d %s", code, body)
	}
	waitOn(t, held.ended, "the first request's end held in its attempt span")
	f.client.CloseIdleConnections()
	if code, _, body := f.post(t.Context(), stream, "Authorization", "Bearer sk-k"); code != http.StatusOK {
		t.Fatalf("next stream on a new connection: %d %s", code, body)
	}
}
