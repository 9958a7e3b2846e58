package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

func jsonString(body []byte, field string) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return "", fmt.Errorf("decoding %.200s: %w", body, err)
	}
	var s string
	if raw, ok := m[field]; ok {
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("field %s of %.200s: %w", field, body, err)
		}
	}
	return s, nil
}

// Percentile returns the q-quantile (0 < q ≤ 1) of ds by the nearest-rank
// method.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*q+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// PolicyPropagation makes n adaptive-policy PUTs, each on a follower, and
// returns for each the time from sending the PUT until every live router's
// GET /api/v1/adaptive-routing-policy shows it. Each change gets its own
// min_samples value so the poll can tell them apart.
func PolicyPropagation(ctx context.Context, c *Cluster, n int) ([]time.Duration, error) {
	leader, err := c.Leader(ctx)
	if err != nil {
		return nil, err
	}
	var followers []*Router
	for _, r := range c.Live() {
		if r.ID != leader {
			followers = append(followers, r)
		}
	}
	if len(followers) == 0 {
		return nil, errors.New("no follower")
	}
	out := make([]time.Duration, 0, n)
	for i := range n {
		ms := 1000 + i
		body := fmt.Sprintf(`{"enabled":true,"latency_weight":1,"cost_weight":0.5,"load_weight":0.25,"exploration_ratio":0.05,"min_samples":%d}`, ms)
		f := followers[i%len(followers)]
		start := time.Now()
		code, b, err := Do(ctx, http.MethodPut, f.Admin+"/api/v1/adaptive-routing-policy", c.Token, body)
		if err != nil || code != http.StatusOK {
			return out, fmt.Errorf("PUT policy on follower %s: %d %s %v", f.ID, code, b, err)
		}
		pending := c.Live()
		err = testwait.Poll(5*time.Second, 2*time.Millisecond, func() error {
			var rest []*Router
			for _, r := range pending {
				code, b, err := Do(ctx, http.MethodGet, r.Admin+"/api/v1/adaptive-routing-policy", c.Token, "")
				var p struct {
					MinSamples int `json:"min_samples"`
				}
				if err != nil || code != http.StatusOK || json.Unmarshal(b, &p) != nil || p.MinSamples != ms {
					rest = append(rest, r)
				}
			}
			pending = rest
			if len(pending) > 0 {
				return fmt.Errorf("%s still without change %d", pending[0].ID, i)
			}
			return nil
		})
		if err != nil {
			return out, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// KillResult is what LeaderKill measured.
type KillResult struct {
	Killed string
	// Election is the time from SIGKILL until every surviving router
	// reports the same new leader.
	Election  time.Duration
	NewLeader string
	// Acked writes (201), of which Lost are missing afterwards and
	// Duplicated were applied more than once (audit) or answered 409 on
	// a retry with the same Idempotency-Key.
	Acked, Lost, Duplicated int
	// Retries through other routers, and failed writes (never acked).
	Retries, Unacked int
	Load             LoadResult
}

// LeaderKill makes `writes` route creations, each with its own
// Idempotency-Key, round-robin over all the routers (the killed one
// included), retrying an ambiguous or failed write through the next
// router; after killAt acknowledged writes it
// SIGKILLs the leader. Meanwhile a chat load runs against the routers that
// survive. Afterwards it checks every acknowledged route on every survivor
// and the audit log for double application.
func LeaderKill(ctx context.Context, c *Cluster, writes, killAt int, model string) (KillResult, error) {
	return LeaderKillLoad(ctx, c, writes, killAt, "sim-a", func(ctx context.Context, targets []string) LoadResult {
		return ChatLoad(ctx, targets, model, 2)
	})
}

// LeaderKillLoad is LeaderKill with the routes' target provider named and
// the data-plane load given by load (run against the API URLs of the
// routers that survive).
func LeaderKillLoad(ctx context.Context, c *Cluster, writes, killAt int, provider string, load LoadFunc) (KillResult, error) {
	var res KillResult
	leader, err := c.Leader(ctx)
	if err != nil {
		return res, err
	}
	res.Killed = leader
	var survivors []string
	for _, r := range c.Live() {
		if r.ID != leader {
			survivors = append(survivors, r.API)
		}
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan LoadResult, 1)
	go func() { loadDone <- load(loadCtx, survivors) }()
	defer stopLoad()

	var electionErr error
	var killWG sync.WaitGroup
	kill := func() {
		defer killWG.Done()
		start := time.Now()
		c.Router(leader).Proc.Kill()
		electionErr = testwait.Poll(15*time.Second, 5*time.Millisecond, func() error {
			l, err := c.Leader(ctx)
			if err == nil && l == leader {
				err = errors.New("old leader still reported")
			}
			if err == nil {
				res.NewLeader = l
			}
			return err
		})
		res.Election = time.Since(start)
	}

	acked := map[string]bool{}
	routers := c.Routers
	next := 0
	for i := range writes {
		name := fmt.Sprintf("w-%03d", i)
		body := fmt.Sprintf(`{"model":%q,"strategy":"round_robin","targets":[{"provider":%q,"model":"m"}]}`, name, provider)
		deadline := time.Now().Add(20 * time.Second)
		for attempt := 0; ; attempt++ {
			r := routers[next%len(routers)]
			next++
			code, b, err := Do(ctx, http.MethodPost, r.Admin+"/api/v1/routes", c.Token, body, "Idempotency-Key", "e2e-"+name)
			if err == nil && code == http.StatusCreated {
				acked[name] = true
				break
			}
			if err == nil && code == http.StatusConflict {
				// The same key must replay the first answer, never "exists".
				res.Duplicated++
				acked[name] = true
				break
			}
			if err == nil && code/100 == 4 {
				return res, fmt.Errorf("write %s on %s: %d %s", name, r.ID, code, b)
			}
			res.Retries++
			if time.Now().After(deadline) {
				res.Unacked++
				break
			}
			time.Sleep(time.Duration(20*(attempt+1)) * time.Millisecond)
		}
		if len(acked) == killAt {
			killWG.Add(1)
			go kill()
		}
	}
	killWG.Wait()
	stopLoad()
	if len(acked) < killAt {
		<-loadDone
		return res, fmt.Errorf("only %d writes acknowledged; the leader was never killed", len(acked))
	}
	res.Load = <-loadDone
	res.Acked = len(acked)
	if electionErr != nil {
		return res, fmt.Errorf("election after killing %s: %w", leader, electionErr)
	}

	// Every acknowledged route exists on every survivor.
	for _, r := range c.Live() {
		err := testwait.Poll(10*time.Second, 20*time.Millisecond, func() error {
			code, b, err := Do(ctx, http.MethodGet, r.Admin+"/api/v1/routes", c.Token, "")
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("GET routes on %s: %d %v", r.ID, code, err)
			}
			var list struct {
				Data []struct {
					Model string `json:"model"`
				} `json:"data"`
			}
			if err := json.Unmarshal(b, &list); err != nil {
				return err
			}
			have := map[string]bool{}
			for _, d := range list.Data {
				have[d.Model] = true
			}
			lost := 0
			for name := range acked {
				if !have[name] {
					lost++
				}
			}
			if lost > 0 {
				res.Lost = max(res.Lost, lost)
				return fmt.Errorf("%s lacks %d acknowledged routes", r.ID, lost)
			}
			return nil
		})
		if err != nil {
			return res, err
		}
	}
	res.Lost = 0

	// The audit log shows each route created exactly once, and no refused
	// second attempt.
	r := c.Live()[0]
	code, b, err := Do(ctx, http.MethodGet, r.Admin+"/api/v1/audit?limit=10000", c.Token, "")
	if err != nil || code != http.StatusOK {
		return res, fmt.Errorf("GET audit: %d %v", code, err)
	}
	var audit struct {
		Data []struct {
			Action   string `json:"action"`
			Resource string `json:"resource"`
			Outcome  string `json:"outcome"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &audit); err != nil {
		return res, err
	}
	count := map[string]int{}
	for _, e := range audit.Data {
		if e.Action == "route.create" {
			count[e.Resource]++
		}
	}
	var dups []string
	for name := range acked {
		switch n := count["route/"+name]; {
		case n > 1:
			res.Duplicated++
			dups = append(dups, name)
		case n == 0:
			return res, fmt.Errorf("no audit entry for acknowledged route %s", name)
		}
	}
	sort.Strings(dups)
	if len(dups) > 0 {
		return res, fmt.Errorf("routes created more than once: %v", dups)
	}
	return res, nil
}
