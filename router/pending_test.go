package router

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"testing"

	"github.com/valyala/fasthttp"
)

// heapAllocated is the bytes the process has allocated on the heap so
// far (runtime/metrics, cumulative): what any stretch of the test can
// have raised the heap by at most.
func heapAllocated() uint64 {
	s := []rtmetrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// Clients that declare a large body and send one byte of it do not make
// the router set the declared size aside: sixteen of them, each declaring
// 8 MiB, make it allocate far less than the 128 MiB they declared, on
// either front. Each gets an OpenAI error: 408 once read_body passed, or
// on the fasthttp front, for the bodies past the memory budget of the
// bodies being received, 503 body_memory_busy at once. The budget is
// given back: a long prompt sent whole afterwards is served.
func TestSlowClientsDeclaringLargeBodiesDoNotPinTheirSize(t *testing.T) {
	const (
		clients  = 16
		declared = 8 << 20
	)
	for _, fr := range fronts {
		t.Run(fr.name, func(t *testing.T) {
			eng := newEngine(t, okChat)
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin")+
				"\n[limits]\nmax_body_bytes = "+fmt.Sprint(declared)+"\n[timeouts]\nread_body = \"300ms\"\n", nil, nil, nil)
			before := heapAllocated()
			codes := make([]string, clients)
			var wg sync.WaitGroup
			for i := range clients {
				c := f.dial(t)
				wg.Go(func() {
					_, _ = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", declared)
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					if err != nil {
						codes[i] = err.Error()
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					codes[i] = fmt.Sprintf("%d %s", resp.StatusCode, errorCode(t, string(b)))
				})
			}
			wg.Wait()
			grew := heapAllocated() - before
			for _, c := range codes {
				if c != "408 request_timeout" && c != "503 body_memory_busy" {
					t.Errorf("a slow client got %q, want 408 request_timeout or 503 body_memory_busy", c)
				}
			}
			if grew > clients*declared/4 {
				t.Errorf("the router allocated %d MiB for %d clients that declared %d MiB each and sent one byte",
					grew>>20, clients, declared>>20)
			}
			t.Logf("answers %v; allocated %.1f MiB meanwhile", codes, float64(grew)/(1<<20))

			prompt := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("word ", 300_000) + `"}]}`
			if code, _, body := f.post(t.Context(), prompt); code != http.StatusOK {
				t.Fatalf("a 1.5 MB prompt after the slow clients: %d %s", code, body)
			}
		})
	}
}

// The budget counts only the bodies above the size every request may
// have set aside (maxBodyHint), gives a refused request no bytes and
// ends a reservation once.
func TestPendingBodiesBudget(t *testing.T) {
	var p pendingBodies
	var a, b, c, small struct{ h fasthttp.RequestHeader }
	const budget = 3 << 20
	if !p.admit(&small.h, maxBodyHint, budget) {
		t.Fatal("a body of maxBodyHint was refused")
	}
	if !p.admit(&a.h, 2<<20, budget) {
		t.Fatal("the first large body was refused")
	}
	if p.admit(&b.h, 2<<20, budget) {
		t.Fatal("a second body past the budget was admitted")
	}
	if !p.done(&b.h) || p.done(&b.h) {
		t.Fatal("the refused body's end: want refused once, then no reservation")
	}
	if !p.admit(&c.h, 1<<20, budget) {
		t.Fatal("a body within what is left was refused")
	}
	if p.done(&a.h) || p.done(&c.h) || p.done(&small.h) {
		t.Fatal("an admitted body read as refused")
	}
	if !p.admit(&b.h, budget, budget) {
		t.Fatal("the budget was not given back")
	}
}
