package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

// FailoverResult is what FirstTokenFailover saw.
type FailoverResult struct {
	Requests, Clean int
	// VictimAttempts reached the failing engine during the run.
	VictimAttempts int64
	Problems       []string
}

// FirstTokenFailover sends n requests (alternately streaming through a raw
// SSE reader and non-streaming through openai-go) for model to api while
// victim fails before its first token (the caller arranged how). Every
// answer must be one clean response from another engine: a stream with
// exactly one role preamble, one completion id, maxTokens content chunks,
// no error event and a final [DONE]; a non-streaming completion with
// content.
func FirstTokenFailover(ctx context.Context, api string, victim *Tap, n, maxTokens int) FailoverResult {
	var res FailoverResult
	before := victim.Generations()
	oc := NewOpenAI(api, "")
	for i := range n {
		res.Requests++
		if i%2 == 0 {
			s, done := StartStream(ctx, api, "", "chat", fmt.Sprintf("fo-%d", i), maxTokens)
			<-done
			switch {
			case s.Err != nil || s.Status != http.StatusOK:
				res.Problems = append(res.Problems, fmt.Sprintf("stream %d: status %d err %v", i, s.Status, s.Err))
			case s.ErrorEv || !s.Done:
				res.Problems = append(res.Problems, fmt.Sprintf("stream %d: error event %v, [DONE] %v", i, s.ErrorEv, s.Done))
			case s.Roles != 1 || len(s.IDs) != 1 || s.Tokens != maxTokens:
				res.Problems = append(res.Problems, fmt.Sprintf("stream %d: %d role preambles, %d completion ids, %d of %d tokens",
					i, s.Roles, len(s.IDs), s.Tokens, maxTokens))
			default:
				res.Clean++
			}
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		c, err := ChatOnce(rctx, oc, "chat", int64(maxTokens))
		cancel()
		switch {
		case err != nil:
			res.Problems = append(res.Problems, fmt.Sprintf("request %d: %v", i, err))
		case len(c.Choices) != 1 || c.Choices[0].Message.Content == "":
			res.Problems = append(res.Problems, fmt.Sprintf("request %d: %d choices", i, len(c.Choices)))
		default:
			res.Clean++
		}
	}
	res.VictimAttempts = victim.Generations() - before
	return res
}

// BudgetResult is what RetryBudget measured.
type BudgetResult struct {
	Requests int
	Statuses map[int]int
	// Attempts reached the engines while they all answered 503.
	Attempts int64
	// Window is how long the engines answered 503.
	Window time.Duration
	// Recovery is the time from the engines' recovery until a round of
	// requests succeeded on every router (and the next rounds as well).
	Recovery time.Duration
}

// BudgetBound is the most upstream attempts n requests over routers
// routers and engines engines may cost while every engine fails for
// window: each request's own attempt, the retries the budget allows
// (0.2 per request plus a burst of 5 per router, the default [breaker]
// failures), and one free retry per half-open probe, which the routers'
// health checks allow once per engine per recovery interval (2 s, the
// default) each.
func BudgetBound(n, routers, engines int, window time.Duration) int64 {
	const burst, recovery = 5, 2 * time.Second
	probes := routers * engines * (int(window/recovery) + 1)
	return int64(n + n/5 + routers*burst + probes)
}

// RetryBudget makes every engine answer 503 to its generations (the sim's
// own fault: health checks still pass, as an overloaded engine's do),
// sends n non-streaming requests round-robin over apis, spread evenly over
// at least `over` (so breakers open, half-open on their health checks and
// reopen during the outage, as in a real one), and counts the
// upstream attempts at the engines' taps; then it clears the fault and
// measures how long until every router serves again (stable for 20 rounds
// of 50 ms).
func RetryBudget(ctx context.Context, apis []string, engines []*Engine, n int, over time.Duration) (BudgetResult, error) {
	res := BudgetResult{Statuses: map[int]int{}}
	sum := func() (s int64) {
		for _, e := range engines {
			s += e.Tap.Generations()
		}
		return s
	}
	fault := func(f string) error {
		for _, e := range engines {
			code, b, err := Do(ctx, http.MethodPost, e.URL+"/sim/faults", "", f)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("status %d: %s", code, b)
			}
			if err != nil {
				return fmt.Errorf("setting the faults of %s: %w", e.Name, err)
			}
		}
		return nil
	}
	if err := fault(`{"error_rate":1,"status":503}`); err != nil {
		return res, err
	}
	failing := time.Now()
	a0 := sum()
	body := `{"model":"chat","messages":[{"role":"user","content":"ping"}],"max_tokens":4}`
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				code, _, err := Do(rctx, http.MethodPost, apis[i%len(apis)]+"/v1/chat/completions", "", body)
				cancel()
				if err != nil {
					code = -1
				}
				mu.Lock()
				res.Statuses[code]++
				res.Requests++
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		time.Sleep(time.Until(failing.Add(over * time.Duration(i) / time.Duration(n))))
		work <- i
	}
	close(work)
	wg.Wait()
	res.Attempts = sum() - a0

	if err := fault(`{"error_rate":0,"status":0}`); err != nil {
		return res, err
	}
	healed := time.Now()
	res.Window = healed.Sub(failing)
	round := func() bool {
		for _, api := range apis {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			code, _, err := Do(rctx, http.MethodPost, api+"/v1/chat/completions", "", body)
			cancel()
			if err != nil || code != http.StatusOK {
				return false
			}
		}
		return true
	}
	err := testwait.Poll(30*time.Second, 50*time.Millisecond, func() error {
		if !round() {
			return errors.New("a router still fails requests")
		}
		return nil
	})
	res.Recovery = time.Since(healed)
	if err != nil {
		return res, fmt.Errorf("no recovery: %w", err)
	}
	for i := range 20 {
		if !round() {
			return res, fmt.Errorf("recovered after %v, then failed again in round %d", res.Recovery, i)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return res, nil
}

// EngineKillResult is what EngineKill measured.
type EngineKillResult struct {
	Streams, OnVictim int
	// VictimEnded: streams on the victim that ended with an error event
	// and no [DONE]; OthersDone: the others that ended with [DONE].
	VictimEnded, OthersDone int
	// LastVictimAttempt is the last inference attempt that reached the
	// victim's tap after the kill, relative to the kill (≤ 0: none).
	LastVictimAttempt time.Duration
	// FirstSecond and Later count the attempts that reached the victim in
	// the first second after the kill and afterwards (the half-open
	// breaker probes: at most one per router per breaker open period).
	FirstSecond, Later int
	Window             time.Duration // from the kill to the end of the load
	Load               LoadResult
	Problems           []string
}

// routedProof is how many attempts the surviving engines must have served
// after the first second past a kill before EngineKill trusts its count
// of attempts at the dead engine: the routers were routing all along.
const routedProof = 200

// EngineKill opens `streams` long streams round-robin over apis, waits for
// their first tokens, starts load at the routers and waits until it reaches
// every engine, kills engines[victim] and checks how every stream ended, how
// soon the routers stopped sending the victim work (over at least `after`,
// and only once the survivors served routedProof attempts after the first
// second), and how the load fared.
func EngineKill(ctx context.Context, apis []string, engines []*Engine, victimAt, streams, maxTokens int, load LoadFunc, after time.Duration) (EngineKillResult, error) {
	var res EngineKillResult
	victim := engines[victimAt]
	type open struct {
		id   string
		s    *Stream
		done <-chan struct{}
	}
	var all []open
	for i := range streams {
		id := fmt.Sprintf("kill-%d", i)
		s, done := StartStream(ctx, apis[i%len(apis)], "", "chat", id, maxTokens)
		all = append(all, open{id, s, done})
	}
	for _, o := range all {
		select {
		case <-o.s.First():
		case <-time.After(30 * time.Second):
			return res, fmt.Errorf("stream %s: no first token within 30s", o.id)
		}
	}
	onVictim := map[string]bool{}
	for _, o := range all {
		if victim.Tap.Active(o.id) {
			onVictim[o.id] = true
		}
	}
	res.Streams, res.OnVictim = len(all), len(onVictim)
	if len(onVictim) == 0 {
		return res, errors.New("no stream was relayed by the victim engine")
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan LoadResult, 1)
	loadStart := time.Now()
	go func() { loadDone <- load(loadCtx, apis) }()
	// The kill must hit an engine in use: wait until the load reached each.
	if err := testwait.Poll(30*time.Second, 20*time.Millisecond, func() error {
		for _, e := range engines {
			if e.Tap.AttemptsBetween(loadStart, time.Now()) == 0 {
				return fmt.Errorf("no load attempt at %s yet", e.Name)
			}
		}
		return nil
	}); err != nil {
		stopLoad()
		<-loadDone
		return res, fmt.Errorf("load before the kill: %w", err)
	}
	killed := time.Now()
	victim.Proc.Kill()
	for _, o := range all {
		select {
		case <-o.done:
		case <-time.After(60 * time.Second):
			stopLoad()
			<-loadDone
			return res, fmt.Errorf("stream %s did not end within 60s of the kill", o.id)
		}
		s := o.s
		switch {
		case onVictim[o.id] && s.ErrorEv && !s.Done:
			res.VictimEnded++
		case onVictim[o.id]:
			res.Problems = append(res.Problems, fmt.Sprintf("victim stream %s: error event %v, [DONE] %v, err %v", o.id, s.ErrorEv, s.Done, s.Err))
		case s.Done && !s.ErrorEv:
			res.OthersDone++
		default:
			res.Problems = append(res.Problems, fmt.Sprintf("stream %s: error event %v, [DONE] %v, err %v", o.id, s.ErrorEv, s.Done, s.Err))
		}
	}
	// No attempts at the dead engine proves nothing unless the routers
	// kept routing: the window ends once it lasted `after` and the
	// survivors served routedProof attempts made after its first second.
	err := testwait.Poll(after+60*time.Second, 50*time.Millisecond, func() error {
		if time.Since(killed) < after {
			return errors.New("window still open")
		}
		n := 0
		for _, e := range engines {
			if e != victim {
				n += e.Tap.AttemptsBetween(killed.Add(time.Second), time.Now())
			}
		}
		if n < routedProof {
			return fmt.Errorf("the surviving engines served %d attempts after the first second, want %d", n, routedProof)
		}
		return nil
	})
	stopLoad()
	res.Load = <-loadDone
	end := time.Now()
	res.Window = end.Sub(killed)
	res.FirstSecond = victim.Tap.AttemptsBetween(killed, killed.Add(time.Second))
	res.Later = victim.Tap.AttemptsBetween(killed.Add(time.Second), end)
	if last := victim.Tap.LastAttempt(); last.After(killed) {
		res.LastVictimAttempt = last.Sub(killed)
	}
	if err != nil {
		return res, fmt.Errorf("after the kill: %w", err)
	}
	return res, nil
}

// DisconnectCancels opens n long streams to api, waits for their first
// tokens, then drops each client connection and returns, for each, how
// long after the drop the router's upstream request was cancelled (seen
// at the engines' taps).
func DisconnectCancels(ctx context.Context, api string, engines []*Engine, n, maxTokens int) ([]time.Duration, error) {
	type open struct {
		id     string
		cancel context.CancelFunc
		s      *Stream
		done   <-chan struct{}
	}
	var all []open
	defer func() {
		for _, o := range all {
			o.cancel()
		}
	}()
	for i := range n {
		sctx, cancel := context.WithCancel(ctx)
		id := fmt.Sprintf("dc-%d-%d", time.Now().UnixNano(), i)
		s, done := StartStream(sctx, api, "", "chat", id, maxTokens)
		all = append(all, open{id, cancel, s, done})
	}
	for _, o := range all {
		select {
		case <-o.s.First():
		case <-time.After(20 * time.Second):
			return nil, fmt.Errorf("stream %s: no first token", o.id)
		}
		if o.s.Status != http.StatusOK {
			return nil, fmt.Errorf("stream %s: status %d", o.id, o.s.Status)
		}
	}
	var out []time.Duration
	for _, o := range all {
		left := time.Now()
		o.cancel()
		<-o.done
		var at time.Time
		err := testwait.Poll(5*time.Second, 5*time.Millisecond, func() error {
			for _, e := range engines {
				if t, ok := e.Tap.CancelledAt(o.id); ok {
					at = t
					return nil
				}
			}
			return fmt.Errorf("upstream of %s not cancelled", o.id)
		})
		if err != nil {
			return out, err
		}
		out = append(out, max(0, at.Sub(left)))
	}
	return out, nil
}

// RestartResult is what EngineRestart measured.
type RestartResult struct {
	// Back is, per router (by admin URL), how long after the engine
	// answered again the router's first successful request to it came.
	Back map[string]time.Duration
	Load LoadResult
}

// EngineRestart starts a dead engine again (restart returns once it
// answers) under load at the routers, and measures how soon each router
// serves requests from it again: the time until its
// rolter_target_requests_total{provider=victim,outcome="success"} grows.
func EngineRestart(ctx context.Context, apis, admins []string, victim string, restart func(), load LoadFunc) (RestartResult, error) {
	res := RestartResult{Back: map[string]time.Duration{}}
	before := map[string]float64{}
	for _, a := range admins {
		n, err := TargetSuccesses(ctx, a, victim)
		if err != nil {
			return res, err
		}
		before[a] = n
	}
	lctx, stop := context.WithCancel(ctx)
	loaded := make(chan LoadResult, 1)
	go func() { loaded <- load(lctx, apis) }()
	restart()
	back := time.Now()
	err := testwait.Poll(60*time.Second, 50*time.Millisecond, func() error {
		for _, a := range admins {
			if _, done := res.Back[a]; done {
				continue
			}
			n, err := TargetSuccesses(ctx, a, victim)
			if err != nil {
				return err
			}
			if n > before[a] {
				res.Back[a] = time.Since(back)
			}
		}
		if len(res.Back) < len(admins) {
			return fmt.Errorf("%d of %d routers serve from %s again", len(res.Back), len(admins), victim)
		}
		return nil
	})
	stop()
	res.Load = <-loaded
	return res, err
}

// TargetSuccesses sums a router's rolter_target_requests_total with
// outcome="success" for provider (all its targets).
func TargetSuccesses(ctx context.Context, admin, provider string) (float64, error) {
	code, body, err := Do(ctx, http.MethodGet, admin+"/metrics", "", "")
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("%s/metrics: %d", admin, code)
	}
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "rolter_target_requests_total{") || !strings.Contains(line, `outcome="success"`) ||
			!strings.Contains(line, `provider="`+provider+`"`) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			sum += v
		}
	}
	return sum, nil
}
