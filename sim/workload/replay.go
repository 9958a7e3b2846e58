package workload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Mode is how prompts are sent.
type Mode string

// The replayer's modes.
const (
	ModeCompletions Mode = "completions" // /v1/completions with token ids
	ModeChat        Mode = "chat"        // /v1/chat/completions with messages
)

// ReplayConfig configures Replay.
type ReplayConfig struct {
	// Target is the base URL (http://host:port) of an engine or router.
	Target string
	Mode   Mode
	// Model is sent for requests without an adapter ("" lets the target pick).
	Model string
	// Speed divides every send time (2 = twice as fast as the trace).
	Speed float64
	// ConcurrencyCap bounds requests in flight (0: unbounded, pure open loop);
	// at the cap a send waits and the wait counts as lateness.
	ConcurrencyCap int
	Client         *http.Client
	// SentAtHeader, when set, names a header that carries each request's
	// scheduled send time (the replay's start plus At / Speed) in Unix
	// nanoseconds, whenever it actually left (rolter sim --client-clock
	// reads sim.SentAtHeader).
	SentAtHeader string
	// InOrder sends a request only once the previous one's response has
	// begun (its headers came back: the target has taken it) or OrderWait
	// has passed since the previous one was sent, so a long prompt, slower
	// to send and parse, is not overtaken by the next request on its way.
	// Measuring from the previous send keeps waits from adding up behind a
	// target that answers headers only with its first token. The wait
	// counts as lateness (Result.Late). OrderWait 0 is a second.
	InOrder   bool
	OrderWait time.Duration
}

// Result is one request's outcome.
type Result struct {
	Index int
	Sent  time.Time
	// Late is how long after its scheduled time the request was sent.
	Late         time.Duration
	TTFT         time.Duration
	Latency      time.Duration
	Tokens       int
	PromptTokens int
	CachedTokens int
	Err          string // "" on success
}

// ErrIncomplete marks a stream that ended without [DONE].
var ErrIncomplete = errors.New("stream ended early")

// Replay sends reqs open-loop at their times and returns every result,
// in request order. It returns early, with the results so far, when ctx
// ends.
func Replay(ctx context.Context, cfg ReplayConfig, reqs []Request) []Result {
	if cfg.Speed <= 0 {
		cfg.Speed = 1
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	results := make([]Result, len(reqs))
	var sem chan struct{}
	if cfg.ConcurrencyCap > 0 {
		sem = make(chan struct{}, cfg.ConcurrencyCap)
	}
	var wg sync.WaitGroup
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	if cfg.OrderWait <= 0 {
		cfg.OrderWait = time.Second
	}
	var begun chan struct{} // closed when the previous request's response began
	var prevSent time.Time
	sent := 0
loop:
	for i := range reqs {
		at := start.Add(time.Duration(float64(reqs[i].At) / cfg.Speed))
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break loop
			}
		}
		if sem != nil {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				break loop
			}
		}
		if cfg.InOrder && begun != nil {
			if d := time.Until(prevSent.Add(cfg.OrderWait)); d > 0 {
				timer.Reset(d)
				select {
				case <-begun:
					timer.Stop() // Go 1.23 timers: no stale tick after Stop
				case <-timer.C:
				case <-ctx.Done():
					break loop
				}
			}
		}
		prevSent = time.Now()
		next := make(chan struct{})
		begun = next
		sent++
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if sem != nil {
				defer func() { <-sem }()
			}
			results[i] = send(ctx, cfg, reqs[i], at, next)
			results[i].Index = i
		}(i)
	}
	wg.Wait()
	return results[:sent]
}

type streamChunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// send sends r, scheduled at at, and closes begun once the response has
// begun or the request failed.
func send(ctx context.Context, cfg ReplayConfig, r Request, at time.Time, begun chan struct{}) Result {
	var once sync.Once
	began := func() { once.Do(func() { close(begun) }) }
	defer began()
	body := map[string]any{
		"max_tokens":     r.MaxTokens,
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true},
	}
	model := cfg.Model
	if r.Model != "" {
		model = r.Model
	}
	if model != "" {
		body["model"] = model
	}
	path := "/v1/completions"
	switch {
	case cfg.Mode == ModeChat:
		path = "/v1/chat/completions"
		msgs := make([]map[string]string, len(r.Messages))
		for i, m := range r.Messages {
			msgs[i] = map[string]string{"role": m.Role, "content": m.Content}
		}
		body["messages"] = msgs
	case r.Text != "":
		body["prompt"] = r.Text
	default:
		body["prompt"] = r.Tokens
	}
	b, _ := json.Marshal(body)
	res := Result{Sent: time.Now()}
	res.Late = res.Sent.Sub(at)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(cfg.Target, "/")+path, bytes.NewReader(b))
	if err != nil {
		res.Err = err.Error()
		return res
	}
	hr.Header.Set("Content-Type", "application/json")
	if r.Session != "" {
		hr.Header.Set("x-session-id", r.Session)
	}
	if r.ID != "" {
		hr.Header.Set("X-Request-Id", r.ID)
	}
	if cfg.SentAtHeader != "" {
		hr.Header.Set(cfg.SentAtHeader, strconv.FormatInt(at.UnixNano(), 10))
	}
	resp, err := cfg.Client.Do(hr)
	began()
	if err != nil {
		res.Err = "transport"
		return res
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		res.Err = "http " + strconv.Itoa(resp.StatusCode)
		return res
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	done := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var c streamChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			res.Err = "bad chunk"
			return res
		}
		if c.Usage != nil {
			res.PromptTokens = c.Usage.PromptTokens
			if c.Usage.PromptTokensDetails != nil {
				res.CachedTokens = c.Usage.PromptTokensDetails.CachedTokens
			}
		}
		for _, ch := range c.Choices {
			if ch.Text == "" && ch.Delta.Content == "" {
				continue
			}
			if res.Tokens == 0 {
				res.TTFT = time.Since(res.Sent)
			}
			res.Tokens++
		}
	}
	res.Latency = time.Since(res.Sent)
	if !done {
		res.Err = ErrIncomplete.Error()
	}
	return res
}

// Report summarizes a replay.
type Report struct {
	Requests      int
	OK            int
	Errors        map[string]int
	Duration      time.Duration
	TTFT, Latency Percentiles
	OutputTokens  int
	PromptTokens  int
	CachedTokens  int
}

// Percentiles of a latency distribution.
type Percentiles struct {
	P50, P90, P99, Max time.Duration
}

func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(ds))+0.5) - 1
		return ds[min(max(i, 0), len(ds)-1)]
	}
	return Percentiles{P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: ds[len(ds)-1]}
}

// Summarize builds the report of results.
func Summarize(results []Result) Report {
	rep := Report{Requests: len(results), Errors: map[string]int{}}
	var ttft, lat []time.Duration
	var first, last time.Time
	for _, r := range results {
		if first.IsZero() || r.Sent.Before(first) {
			first = r.Sent
		}
		if end := r.Sent.Add(r.Latency); end.After(last) {
			last = end
		}
		if r.Err != "" {
			rep.Errors[r.Err]++
			continue
		}
		rep.OK++
		ttft = append(ttft, r.TTFT)
		lat = append(lat, r.Latency)
		rep.OutputTokens += r.Tokens
		rep.PromptTokens += r.PromptTokens
		rep.CachedTokens += r.CachedTokens
	}
	rep.Duration = last.Sub(first)
	rep.TTFT, rep.Latency = percentiles(ttft), percentiles(lat)
	return rep
}

// Print writes the report; speed > 1 adds the latencies scaled back to
// trace time (wall × speed).
func (rep Report) Print(w io.Writer, speed float64) {
	fmt.Fprintf(w, "requests %d  ok %d  errors %d  wall %.2fs\n", rep.Requests, rep.OK, rep.Requests-rep.OK, rep.Duration.Seconds())
	if len(rep.Errors) > 0 {
		keys := make([]string, 0, len(rep.Errors))
		for k := range rep.Errors {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  error %-22s %d\n", k, rep.Errors[k])
		}
	}
	row := func(name string, p Percentiles, f float64) {
		ms := func(d time.Duration) float64 { return float64(d) * f / float64(time.Millisecond) }
		fmt.Fprintf(w, "%-22s p50 %9.1f ms  p90 %9.1f ms  p99 %9.1f ms  max %9.1f ms\n", name, ms(p.P50), ms(p.P90), ms(p.P99), ms(p.Max))
	}
	row("ttft (wall)", rep.TTFT, 1)
	row("latency (wall)", rep.Latency, 1)
	if speed > 0 && speed != 1 {
		row(fmt.Sprintf("ttft (×%g, trace)", speed), rep.TTFT, speed)
		row(fmt.Sprintf("latency (×%g, trace)", speed), rep.Latency, speed)
	}
	if rep.Duration > 0 {
		fmt.Fprintf(w, "output tokens %d (%.0f tok/s wall)\n", rep.OutputTokens, float64(rep.OutputTokens)/rep.Duration.Seconds())
	}
	if rep.PromptTokens > 0 {
		fmt.Fprintf(w, "prompt tokens %d, cached %d (client-side prefix hit rate %.1f%%)\n",
			rep.PromptTokens, rep.CachedTokens, 100*float64(rep.CachedTokens)/float64(rep.PromptTokens))
	}
}

// PrefixCacheCounters scrapes vLLM's prefix-cache counters from a target's
// /metrics. ok is false when the target does not export them.
func PrefixCacheCounters(ctx context.Context, client *http.Client, target string) (queries, hits float64, ok bool) {
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(target, "/")+"/metrics", nil)
	if err != nil {
		return 0, 0, false
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, false
	}
	defer resp.Body.Close()
	var gotQ, gotH bool
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		switch strings.TrimSuffix(name, "_total") {
		case "vllm:prefix_cache_queries":
			queries, gotQ = queries+v, true
		case "vllm:prefix_cache_hits":
			hits, gotH = hits+v, true
		}
	}
	return queries, hits, gotQ && gotH
}
