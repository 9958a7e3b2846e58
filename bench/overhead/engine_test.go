package overhead

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rolter/rolter/sim"
)

func post(t *testing.T, url string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// The canned engine answers both modes as the sim does (a completion with
// usage; a stream of max_tokens events and [DONE]) and never decodes the
// request: a body it could not parse is answered the same way.
func TestCannedEngineAnswersWithoutDecoding(t *testing.T) {
	cfg := Config{PromptWords: 16, MaxTokens: 5, Engine: EngineCanned}
	addrs, err := startEngine(t.Context(), cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addrs[1]
	code, b := post(t, base+"/v1/chat/completions", benchRequest(cfg, false).body)
	var plain struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &plain); code != http.StatusOK || err != nil || len(plain.Choices) != 1 || plain.Usage.CompletionTokens != 5 {
		t.Fatalf("plain: %d %v %s", code, err, b)
	}
	code, b = post(t, base+"/v1/chat/completions", []byte(`not json at all, "stream":true}`))
	events := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
	if code != http.StatusOK || len(events) != 6 || events[5] != "data: [DONE]" {
		t.Fatalf("stream: %d, %d events: %q", code, len(events), b)
	}
	// Everything else is the sim's own.
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/models: %d", resp.StatusCode)
	}
}

// The open-streams mode keeps its clients' streams open and counts the
// ones that end in the measured part.
func TestStreamsOnceDirect(t *testing.T) {
	cfg := Config{PromptWords: 8, MaxTokens: 1, Engine: EngineCanned, Streams: 8, StreamTokens: 4,
		StreamGap: 5 * time.Millisecond, StreamRounds: 1, StreamDuration: 400 * time.Millisecond}
	addrs, err := startEngine(t.Context(), cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := streamsOnce(t.Context(), cfg, directColumn(addrs))
	if r.stats.errors != 0 || r.stats.sent == 0 || r.perSec <= 0 || r.openAvg <= 0 {
		t.Fatalf("%+v", r)
	}
	// Each stream stays open for its 4 events' gaps at least.
	if r.stats.p50 < 15*time.Millisecond {
		t.Errorf("stream p50 %v, shorter than its events' pacing", r.stats.p50)
	}
}

// The canned engine's answers are byte for byte the sim's (the plain
// body whole, the stream's events in order to [DONE]), and the generator
// reads them without an error, a stream to its last event: with a pause
// between events each request's latency spans every pause.
func TestGeneratorAgainstCannedEngine(t *testing.T) {
	cfg := Config{PromptWords: 16, MaxTokens: 4, Engine: EngineCanned}
	sc := sim.DefaultConfig()
	sc.Model, sc.Engine.Instant = model, true
	s := sim.New(sc, slog.New(slog.DiscardHandler), nil, nil)
	go s.Run(t.Context())
	want, err := record(t.Context(), s.Handler(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := listen(t.Context(), want.serve, 1)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addrs[0]
	for _, stream := range []bool{false, true} {
		rq := benchRequest(cfg, stream)
		code, got := post(t, base+rq.path, rq.body)
		a := want.plain
		if stream {
			a = want.stream
		}
		if code != http.StatusOK || !bytes.Equal(got, bytes.Join(a.parts, nil)) {
			t.Errorf("stream %v: %d %q\nwant %q", stream, code, got, bytes.Join(a.parts, nil))
		}
		g := newGenerator(1)
		st := openLoop(t.Context(), g, func(int) string { return base }, rq, 200, 100*time.Millisecond)
		g.close()
		if st.sent != 20 || st.errors != 0 {
			t.Errorf("stream %v: %d sent, %d errors", stream, st.sent, st.errors)
		}
	}
	if len(want.stream.parts) != cfg.MaxTokens+1 || string(want.stream.parts[len(want.stream.parts)-1]) != "data: [DONE]\n\n" {
		t.Fatalf("recorded stream %q", want.stream.parts)
	}

	// 4 events 20 ms apart: no answer is read before 60 ms.
	slow := Config{PromptWords: 16, MaxTokens: 1, Engine: EngineCanned, Streams: 1, StreamTokens: 4, StreamGap: 20 * time.Millisecond}
	addrs, err = startEngine(t.Context(), slow, 1)
	if err != nil {
		t.Fatal(err)
	}
	g := newGenerator(1)
	defer g.close()
	st := openLoop(t.Context(), g, func(int) string { return "http://" + addrs[0] }, benchRequest(slow, true), 50, 100*time.Millisecond)
	if st.errors != 0 || st.lat[0] < 60*time.Millisecond {
		t.Errorf("paced stream: %d errors, fastest %v; want none and ≥ 60ms", st.errors, st.lat[0])
	}
}

// A request that gets no answer, because nothing listens or because the
// answer is cut short, is counted as an error with the client's timeout
// as its latency.
func TestGeneratorCountsFailedRequests(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// half an answer: a length the body never reaches
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{}")
			c.Close()
		}
	}()
	defer ln.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	for _, addr := range []string{ln.Addr().String(), closed.Addr().String()} {
		g := newGenerator(1)
		st := openLoop(t.Context(), g, func(int) string { return "http://" + addr }, benchRequest(Config{PromptWords: 4, MaxTokens: 1}, false), 100, 50*time.Millisecond)
		g.close()
		if st.sent != 5 || st.errors != 5 || st.p50 != g.timeout {
			t.Errorf("%s: %d sent, %d errors, p50 %v", addr, st.sent, st.errors, st.p50)
		}
	}
}

// What one request costs the generator's CPU, direct: the generator's
// send and the canned engine's answer, one after another (allocations
// are the repeatable figure).
func BenchmarkDirectRequest(b *testing.B) {
	for _, stream := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "stream"}[stream], func(b *testing.B) {
			cfg := Config{PromptWords: 64, MaxTokens: 8, Engine: EngineCanned}
			addrs, err := startEngine(b.Context(), cfg, 1)
			if err != nil {
				b.Fatal(err)
			}
			base, rq := "http://"+addrs[0], benchRequest(cfg, stream)
			g := newGenerator(1)
			defer g.close()
			b.ReportAllocs()
			for b.Loop() {
				if _, failed := g.send(base, rq, time.Now()); failed {
					b.Fatal("failed")
				}
			}
		})
	}
}

// An accept that fails for want of a file descriptor is retried; any
// other error ends the engine's port as before.
func TestEngineListenerOutlastsNoFileDescriptors(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	fl := &flakyListener{errs: []error{syscall.EMFILE, syscall.ENFILE, nil, net.ErrClosed}, conn: c1}
	l := patientListener{Listener: fl, done: t.Context().Done()}
	if c, err := l.Accept(); err != nil || c != c1 || fl.calls != 3 {
		t.Fatalf("accept: %v, %v after %d calls; want the connection after 3", c, err, fl.calls)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("closed listener: %v", err)
	}
}

type flakyListener struct {
	net.Listener
	errs  []error
	conn  net.Conn
	calls int
}

func (f *flakyListener) Accept() (net.Conn, error) {
	err := f.errs[f.calls]
	f.calls++
	if err != nil {
		return nil, err
	}
	return f.conn, nil
}
