package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// HeaderRequestID is the header a test client sets so a Tap can tell its
// requests apart (the router passes client headers upstream).
const HeaderRequestID = "x-e2e-id"

// Tap is an HTTP hop the test puts between the routers and one engine: it
// counts every upstream attempt that reaches the engine, can answer 503 in
// the engine's place, and records when the router gave up on a request
// (its side of the connection closed before the engine had finished).
// When the engine cannot be reached or breaks mid-answer, the tap aborts
// its connection to the router, as the engine's own socket would.
type Tap struct {
	URL    string // http://127.0.0.1:port, what the routers' providers name
	engine string

	attempts  atomic.Int64
	generated atomic.Int64 // attempts at /v1/... (not health probes)
	down      atomic.Bool
	inflight  atomic.Int64
	transport *http.Transport

	mu          sync.Mutex
	cancelledAt map[string]time.Time // request id → when the router cancelled
	active      map[string]bool      // request ids being relayed now
	lastAttempt time.Time
	times       []time.Time // arrival of every /v1/ request (bounded)
}

// maxTimes bounds the arrival times a tap keeps.
const maxTimes = 1 << 20

// StartTap starts a tap in front of engine (a base URL); t.Cleanup stops it.
func StartTap(t testing.TB, engine string) *Tap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp := &Tap{URL: "http://" + ln.Addr().String(), engine: strings.TrimSuffix(engine, "/"),
		cancelledAt: map[string]time.Time{}, active: map[string]bool{},
		transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 256,
			DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}}
	srv := &http.Server{Handler: tp, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
		tp.transport.CloseIdleConnections()
	})
	return tp
}

// SetDown makes the tap answer every request 503 itself (true) or pass
// them to the engine again (false).
func (tp *Tap) SetDown(down bool) { tp.down.Store(down) }

// Attempts is how many requests of any kind reached the tap.
func (tp *Tap) Attempts() int64 { return tp.attempts.Load() }

// Generations is how many /v1/ requests (inference attempts) reached it.
func (tp *Tap) Generations() int64 { return tp.generated.Load() }

// InFlight is how many requests the tap is relaying now.
func (tp *Tap) InFlight() int64 { return tp.inflight.Load() }

// LastAttempt is when the last /v1/ request arrived.
func (tp *Tap) LastAttempt() time.Time {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.lastAttempt
}

// AttemptsBetween counts the /v1/ requests that arrived in (from, to].
func (tp *Tap) AttemptsBetween(from, to time.Time) int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	n := 0
	for _, at := range tp.times {
		if at.After(from) && !at.After(to) {
			n++
		}
	}
	return n
}

// Active reports whether the request carrying id is being relayed now.
func (tp *Tap) Active(id string) bool {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.active[id]
}

// CancelledAt returns when the router cancelled the request carrying id.
func (tp *Tap) CancelledAt(id string) (time.Time, bool) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	at, ok := tp.cancelledAt[id]
	return at, ok
}

func (tp *Tap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tp.attempts.Add(1)
	gen := strings.HasPrefix(r.URL.Path, "/v1/") && r.Method == http.MethodPost
	if gen {
		tp.generated.Add(1)
		tp.mu.Lock()
		tp.lastAttempt = time.Now()
		if len(tp.times) < maxTimes {
			tp.times = append(tp.times, tp.lastAttempt)
		}
		tp.mu.Unlock()
	}
	// An overloaded engine still answers its health probes; only
	// generations get the 503.
	if gen && tp.down.Load() {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"message":"engine overloaded (e2e tap)","type":"server_error","code":"unavailable"}}`)
		return
	}
	tp.inflight.Add(1)
	defer tp.inflight.Add(-1)
	id := r.Header.Get(HeaderRequestID)
	if id != "" {
		tp.mu.Lock()
		tp.active[id] = true
		tp.mu.Unlock()
		defer func() {
			tp.mu.Lock()
			delete(tp.active, id)
			tp.mu.Unlock()
		}()
	}
	// The request body is read whole before it is passed on, as the
	// router reads its clients'. Handed to the transport as it is, the
	// server's body can still be in the transport's hands (its last read,
	// a check for bytes past Content-Length) when the engine's answer
	// comes back; the server closes it on writing the answer's headers,
	// and the transport, reading a closed body, closes its connection to
	// the engine under the answer
	// (TestTapKeepsTheEngineConnectionWhileItAnswers).
	body, err := io.ReadAll(r.Body)
	if err != nil {
		tp.noteCancel(r, id)
		panic(http.ErrAbortHandler)
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, tp.engine+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	out.Header = r.Header.Clone()
	resp, err := tp.transport.RoundTrip(out)
	if err != nil {
		tp.noteCancel(r, id)
		panic(http.ErrAbortHandler)
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 16<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				tp.noteCancel(r, id)
				return
			}
			_ = rc.Flush()
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			if tp.noteCancel(r, id) {
				return
			}
			panic(http.ErrAbortHandler) // the engine broke: break the router's connection too
		}
	}
}

// noteCancel records the router's cancellation of r (true) when its
// context has ended.
func (tp *Tap) noteCancel(r *http.Request, id string) bool {
	if r.Context().Err() == nil {
		return false
	}
	if id != "" {
		tp.mu.Lock()
		if _, seen := tp.cancelledAt[id]; !seen {
			tp.cancelledAt[id] = time.Now()
		}
		tp.mu.Unlock()
	}
	return true
}
