package router

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rolter/rolter/strategies"
)

// rawEngine records each POST body it gets, byte for byte, and answers
// with answer.
func rawEngine(t *testing.T, answer func(http.ResponseWriter)) (*httptest.Server, func() map[string]int) {
	t.Helper()
	var mu sync.Mutex
	got := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("engine read: %v", err)
		}
		mu.Lock()
		got[string(b)]++
		mu.Unlock()
		answer(w)
	}))
	t.Cleanup(srv.Close)
	return srv, func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string]int, len(got))
		for k, v := range got {
			out[k] = v
		}
		return out
	}
}

// Bodies of every size, sent at once and each retried on a second engine,
// reach both engines byte for byte: a recycled buffer is never handed to
// another request while its own still uses it, and never lends a request
// bytes of an earlier, longer one. On fasthttp's server the body is the
// server's own buffer, lent (lentBody): it must not go back to fasthttp
// while a retry still sends from it either.
func TestRecycledBodiesReachEveryAttemptWhole(t *testing.T) {
	for _, fr := range fronts {
		t.Run(fr.name, func(t *testing.T) { recycledBodiesReachEveryAttempt(t, fr) })
	}
}

func recycledBodiesReachEveryAttempt(t *testing.T, fr front) {
	bad, badGot := rawEngine(t, func(w http.ResponseWriter) {
		http.Error(w, `{"error":{"message":"busy"}}`, http.StatusServiceUnavailable)
	})
	good, goodGot := rawEngine(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","choices":[]}`)
	})
	f := fr.serveFront(t, providers("bad", bad.URL, "good", good.URL)+`
[[routes]]
model = "m"
strategy = "round_robin"
targets = [{provider = "bad", model = "up"}, {provider = "good", model = "up"}]
[retry]
attempts = 1
budget = 1.0
[breaker]
failures = 1000
`, nil, nil, nil)
	// Long and short bodies interleaved, so that a short one is likely to
	// get a buffer a long one used; half are sent chunked (no length), and
	// a third ask to close the connection after their answer (fasthttp's
	// front then recycles the request before it settles it).
	sizes := []int{300 << 10, 10, 2 << 10, 700 << 10, 100, 64 << 10, 1 << 20, 3}
	const rounds = 3
	type sent struct {
		body    string
		chunked bool
		close   bool
	}
	var reqs []sent
	for r := range rounds {
		for i, n := range sizes {
			text := strings.Repeat(fmt.Sprintf("r%d-%d ", r, i), n/8+1)
			reqs = append(reqs, sent{`{"model":"m","messages":[{"role":"user","content":"` + text + `"}]}`, (r+i)%2 == 1, (r+i)%3 == 0})
		}
	}
	var wg sync.WaitGroup
	errs := make(chan string, len(reqs))
	for _, rq := range reqs {
		wg.Go(func() {
			var body io.Reader = strings.NewReader(rq.body)
			if rq.chunked {
				body = io.MultiReader(body) // hides the length: sent chunked
			}
			req, _ := http.NewRequest(http.MethodPost, f.base+"/v1/chat/completions", body)
			req.Close = rq.close
			resp, err := f.client.Do(req)
			if err != nil {
				errs <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- fmt.Sprintf("%d %s", resp.StatusCode, b)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	// round_robin sends every other request to the failing engine first,
	// and it is then retried on the answering one.
	want := map[string]bool{}
	for _, rq := range reqs {
		want[strings.Replace(rq.body, `"model":"m"`, `"model":"up"`, 1)] = true
	}
	retried := badGot()
	if len(retried) < len(reqs)/4 {
		t.Errorf("the failing engine got %d requests of %d: the retry path was not exercised", len(retried), len(reqs))
	}
	for b, n := range retried {
		if !want[b] || n != 1 {
			t.Errorf("the failing engine got a %d-byte body %d times that no client sent once", len(b), n)
		}
	}
	answered := goodGot()
	for b := range want {
		if answered[b] != 1 {
			t.Errorf("the answering engine got a %d-byte body %d times, want once", len(b), answered[b])
		}
	}
	if len(answered) != len(want) {
		t.Errorf("the answering engine got %d distinct bodies, want %d", len(answered), len(want))
	}
}

// The buffer a body is read into holds the body and at most as much
// again, never more than max_body_bytes + 1 (docs/operations.md).
func TestBodyBufferIsBoundedByTheBodyAndTheLimit(t *testing.T) {
	const limit = 3 << 20
	for _, c := range []struct {
		name     string
		n        int
		declared bool
	}{
		{"empty", 0, true},
		{"short", 200, true},
		{"past the hint", 600 << 10, true},
		{"just under a class", 1<<20 - 1, true},
		{"at the limit", limit, true},
		{"chunked short", 200, false},
		{"chunked long", 900 << 10, false},
		{"chunked at the limit", limit, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := bytes.Repeat([]byte{'x'}, c.n)
			length := int64(-1)
			if c.declared {
				length = int64(c.n)
			}
			bb, err := readBody(io.MultiReader(bytes.NewReader(body)), length, limit)
			if err != nil {
				t.Fatal(err)
			}
			defer bb.release()
			if !bytes.Equal(bb.b, body) {
				t.Fatalf("read %d bytes, want the %d sent", len(bb.b), c.n)
			}
			if cap(bb.b) > limit+1 || cap(bb.b) > 2*c.n+2<<minBodyClass {
				t.Errorf("a %d-byte body holds a %d-byte buffer", c.n, cap(bb.b))
			}
		})
	}
}

// Token-id prompts read into a recycled buffer's storage get the same ids
// and block keys as when read into their own, while other requests with
// longer and shorter prompts recycle the same buffers around them.
func TestRecycledIDStorageKeepsEveryRequestsKeys(t *testing.T) {
	lengths := []int{100_000, 17, 40_000, 0, 3_000, 100_001, 16, 64_000}
	type ref struct {
		body []byte
		ids  []uint32
		keys []uint64
	}
	var refs []ref
	for i, n := range lengths {
		body := tokenBody(n)
		if n == 0 {
			body = []byte(`{"model":"llama","prompt":"no ids","max_tokens":8}`)
		}
		if i%3 == 1 {
			// A second prompt of ids: the decoder keeps the last.
			body = append(body[:len(body)-1], `,"prompt":[5,6,7]}`...)
		}
		var rc strategies.RouteContext
		if err := buildRouteContext(&rc, http.Header{}, body, "llama", ""); err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref{body: body, ids: slices.Clone(rc.TokenIDs), keys: slices.Clone(rc.BlockKeys)})
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for round := range 6 {
				rf := refs[(w*3+round)%len(refs)]
				bb, err := readBody(bytes.NewReader(rf.body), int64(len(rf.body)), 8<<20)
				if err != nil {
					t.Error(err)
					return
				}
				req, err := bb.parse()
				if err != nil {
					t.Error(err)
					return
				}
				var rc strategies.RouteContext
				if err := fillFromRequest(&rc, http.Header{}, &req, "", promptReads{text: true}); err != nil {
					t.Error(err)
					return
				}
				runtime.Gosched() // the request is in flight: others recycle around it
				if !slices.Equal(rc.TokenIDs, rf.ids) || !slices.Equal(rc.BlockKeys, rf.keys) {
					t.Errorf("a %d-byte body read %d ids and %d keys, want %d and %d (or they differ)",
						len(rf.body), len(rc.TokenIDs), len(rc.BlockKeys), len(rf.ids), len(rf.keys))
				}
				bb.recycle(&req, &rc)
				bb.release()
			}
		})
	}
	wg.Wait()
}

// lender counts the times a lent body was handed back.
type lender struct{ back int }

func (l *lender) ResetBody() { l.back++ }

// A server's body buffer is used in place only when it obeys the bound of
// the router's own (the body and at most as much again, at most
// max_body_bytes + 1): a short body in a long body's buffer is copied, so
// that a stream never keeps the long one's memory. A lent buffer goes back
// to its server once, at release, and the next body read into the same
// class of buffer gets a buffer of its own.
func TestLentBodyObeysTheBufferBound(t *testing.T) {
	const limit = 4 << 20
	for _, c := range []struct {
		name     string
		len, cap int
		room     int64
		wantLent bool
	}{
		{"sized for its length", 613 << 10, 1 << 20, limit + 1, true},
		{"exactly its length", 300, 300, limit + 1, true},
		{"empty", 0, 0, limit + 1, true},
		{"a short body in a long one's buffer", 2 << 10, 1 << 20, limit + 1, false},
		{"more than the limit allows", 600 << 10, 1 << 20, 700 << 10, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := make([]byte, c.len, c.cap)
			for i := range b {
				b[i] = 'x'
			}
			var l lender
			bb := lentBody(b, c.room, &l)
			if (bb != nil) != c.wantLent {
				t.Fatalf("lent: %v, want %v", bb != nil, c.wantLent)
			}
			if bb == nil {
				return
			}
			if len(bb.b) != c.len || (c.len > 0 && &bb.b[0] != &b[0]) {
				t.Fatalf("the lent body is not the server's bytes")
			}
			bb.release()
			if l.back != 1 {
				t.Fatalf("handed back %d times, want once", l.back)
			}
			next := newBodyBuf(c.len+1, c.room)
			defer next.release()
			if c.len > 0 && cap(next.b) > 0 && &next.b[:1][0] == &b[0] {
				t.Fatal("a later body was given the lent bytes")
			}
			if cap(next.b) < c.len+1 {
				t.Fatalf("a later body got %d bytes of room, want %d", cap(next.b), c.len+1)
			}
			if l.back != 1 {
				t.Fatalf("handed back %d times, want once", l.back)
			}
		})
	}
}
