//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

// admissionTOML is the fleet of TestAdmission: the routers reach the
// engines directly (a stopped engine refuses connections), and the pool
// saturates at 2 requests per engine.
func admissionTOML(engines []string) string {
	var b strings.Builder
	for i, u := range engines {
		fmt.Fprintf(&b, "[[providers]]\nname = \"e%d\"\napi_base = %q\n\n", i, u+"/v1")
	}
	b.WriteString("[[routes]]\nmodel = \"chat\"\nstrategy = \"power_of_two\"\ntargets = [\n")
	for i := range engines {
		fmt.Fprintf(&b, "  { provider = \"e%d\", model = \"meta-llama/Llama-3.1-8B-Instruct\" },\n", i)
	}
	b.WriteString(`]

[health]
interval = "500ms"
recovery_interval = "250ms"
down_after = 1
up_after = 1

[breaker]
failures = 2
open = "1s"

[admission]
enabled = true
max_engine_load = 2
max_waiting = 0
max_kv_usage = 0
promote_after = "0s"
retry_after = "2s"
[admission.critical]
max_queue = 32
ttl = "20s"
[admission.standard]
max_queue = 32
ttl = "20s"
[admission.sheddable]
max_queue = 6
ttl = "20s"
`)
	return b.String()
}

// streamed is one streaming request's outcome.
type streamed struct {
	status     int
	retryAfter string
	body       string
	first      time.Time // first SSE data line (zero: none)
	err        error
}

// stream sends a streaming chat request with the given priority and
// reads it to the end.
func stream(ctx context.Context, api, priority string, maxTokens int) streamed {
	body := fmt.Sprintf(`{"model":"chat","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"tell me a long story %d"}]}`,
		maxTokens, time.Now().UnixNano())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return streamed{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if priority != "" {
		req.Header.Set("x-rolter-priority", priority)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return streamed{err: err}
	}
	defer resp.Body.Close()
	out := streamed{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		out.body = string(b)
		return out
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") && out.first.IsZero() {
			out.first = time.Now()
		}
	}
	out.err = sc.Err()
	return out
}

// gauge reads one series of a router's /metrics page (labels in
// Prometheus's order, e.g. `rolter_queue_depth{band="sheddable",model="chat"}`).
func gauge(ctx context.Context, admin, series string) float64 {
	code, body, err := Do(ctx, http.MethodGet, admin+"/metrics", "", "")
	if err != nil || code != http.StatusOK {
		return -1
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

func queueDepth(ctx context.Context, admin, band string) float64 {
	return gauge(ctx, admin, `rolter_queue_depth{band="`+band+`",model="chat"}`)
}

// fill starts n long standard streams of different lengths at api (the
// pool is then busy for a while, and frees one slot at a time); wait on
// the result for them to end.
func fill(t *testing.T, ctx context.Context, api string, n int) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Lengths differ so the slots free one at a time.
			if r := stream(ctx, api, "standard", 200+40*i); r.status != http.StatusOK {
				t.Errorf("fill request: %d %s %v", r.status, r.body, r.err)
			}
		}()
	}
	return &wg
}

// TestAdmission is issue 16's multi-process acceptance: 3 routers on Raft
// and 4 `rolter sim` engines with [admission] on.
func TestAdmission(t *testing.T) {
	bin := BuildRolter(t)
	dir := t.TempDir()
	var urls, addrs []string
	var procs []*Proc
	for i := range 4 {
		addr := FreeAddrs(t, 1)[0]
		u, p := StartSimAt(t, bin, fmt.Sprintf("sim-e%d", i), dir, addr, "--speed", "1", "--seed", fmt.Sprint(i+1))
		urls, addrs, procs = append(urls, u), append(addrs, addr), append(procs, p)
	}
	c := StartCluster(t, ClusterOptions{Bin: bin, N: 3, Dir: dir, Config: admissionTOML(urls)})
	r1 := c.Routers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	t.Run("burst over capacity gives 429 with Retry-After, never a 5xx", func(t *testing.T) {
		// 8 slots (4 engines × 2) and 6 sheddable queue places per router:
		// 60 sheddable requests at one router overflow it.
		results := make(chan streamed, 60)
		for range 60 {
			go func() { results <- stream(ctx, r1.API, "sheddable", 120) }()
		}
		counts := map[int]int{}
		for range 60 {
			r := <-results
			if r.err != nil && r.status == 0 {
				t.Fatalf("request failed: %v", r.err)
			}
			counts[r.status]++
			if r.status == http.StatusTooManyRequests {
				if r.retryAfter != "2" || !strings.Contains(r.body, `"code":"queue_full"`) {
					t.Fatalf("429 with Retry-After %q body %s", r.retryAfter, r.body)
				}
			}
			if r.status >= 500 {
				t.Fatalf("a %d reached the client: %s", r.status, r.body)
			}
		}
		t.Logf("statuses: %v", counts)
		if counts[http.StatusTooManyRequests] == 0 || counts[http.StatusOK] < 8 {
			t.Fatalf("statuses %v: want some 429s and at least the pool's 8 served", counts)
		}
	})

	t.Run("a critical request overtakes the sheddable ones queued ahead of it", func(t *testing.T) {
		busy := fill(t, ctx, r1.API, 8)
		if err := testwait.Poll(20*time.Second, 10*time.Millisecond, func() error {
			if n, _ := MetricSum(ctx, r1.Admin, "rolter_target_in_flight"); n < 8 {
				return fmt.Errorf("%v in flight", n)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		shed := make([]streamed, 4)
		for i := range shed {
			wg.Add(1)
			go func() { defer wg.Done(); shed[i] = stream(ctx, r1.API, "sheddable", 20) }()
		}
		if err := testwait.Poll(10*time.Second, 5*time.Millisecond, func() error {
			if d := queueDepth(ctx, r1.Admin, "sheddable"); d != 4 {
				return fmt.Errorf("sheddable depth %v", d)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		crit := stream(ctx, r1.API, "critical", 20)
		wg.Wait()
		busy.Wait()
		if crit.status != http.StatusOK || crit.first.IsZero() {
			t.Fatalf("critical: %d %s %v", crit.status, crit.body, crit.err)
		}
		for i, s := range shed {
			if s.status != http.StatusOK {
				t.Fatalf("sheddable %d: %d %s", i, s.status, s.body)
			}
			if !s.first.After(crit.first) {
				t.Errorf("sheddable %d got its first token %v before the critical one", i, crit.first.Sub(s.first))
			}
		}
	})

	t.Run("a client that leaves the queue is gone within 100ms", func(t *testing.T) {
		busy := fill(t, ctx, r1.API, 8)
		if err := testwait.Poll(20*time.Second, 10*time.Millisecond, func() error {
			if n, _ := MetricSum(ctx, r1.Admin, "rolter_target_in_flight"); n < 8 {
				return fmt.Errorf("%v in flight", n)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		lctx, leave := context.WithCancel(ctx)
		done := make(chan streamed, 1)
		go func() { done <- stream(lctx, r1.API, "sheddable", 20) }()
		if err := testwait.Poll(10*time.Second, 5*time.Millisecond, func() error {
			if d := queueDepth(ctx, r1.Admin, "sheddable"); d != 1 {
				return fmt.Errorf("sheddable depth %v", d)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		left := time.Now()
		leave()
		if err := testwait.Poll(time.Second, 2*time.Millisecond, func() error {
			if d := queueDepth(ctx, r1.Admin, "sheddable"); d != 0 {
				return fmt.Errorf("sheddable depth %v", d)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(left); d > 100*time.Millisecond {
			t.Errorf("the queue emptied %v after the client left, want ≤ 100ms", d)
		} else {
			t.Logf("queue emptied %v after the client left", d.Round(time.Millisecond))
		}
		<-done
		busy.Wait()
	})

	t.Run("with every engine stopped a request waits and succeeds when one starts", func(t *testing.T) {
		for _, p := range procs {
			p.Kill()
		}
		res := make(chan streamed, 1)
		sent := time.Now()
		go func() { res <- stream(ctx, r1.API, "standard", 10) }()
		// Still waiting a few seconds later (health and breakers have
		// seen every engine refuse).
		select {
		case r := <-res:
			t.Fatalf("answered %d %s with no engine up", r.status, r.body)
		case <-time.After(3 * time.Second):
		}
		_, procs[2] = StartSimAt(t, bin, "sim-e2-restarted", dir, addrs[2], "--speed", "1", "--seed", "3")
		r := <-res
		if r.status != http.StatusOK || r.first.IsZero() {
			t.Fatalf("after the engine started: %d %s %v", r.status, r.body, r.err)
		}
		t.Logf("served %v after it was sent", time.Since(sent).Round(time.Millisecond))
	})
}
