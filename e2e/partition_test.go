//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/rolter/rolter/internal/testwait"
)

// Issue 21 part 3: partitions, with the history checked. Three real
// routers whose Raft and gossip traffic crosses a FaultNet (Toxiproxy for
// TCP, a relay for gossip's datagrams); concurrent clients write through
// every router's admin API with Idempotency-Keys, retrying on timeouts;
// the leader is cut from the followers, then a follower from both, then
// the net heals, all under latency and drops. The history of every
// operation is checked with porcupine against AdminModel.

// partitionSeeds is how many seeds TestPartitions runs.
const partitionSeeds = 5

// partitionRun is what one seed measured.
type partitionRun struct {
	Seed                      uint64
	Writes, Unknown, Attempts int
	Retries, Audited          int
	Linearizable              porcupine.CheckResult
	NewLeader1                time.Duration // P1: from the cut to a new leader agreed by the majority
	// CatchUp1, CatchUp2: from the heal until the router that was cut off
	// runs (data plane) the config_version the majority had at the heal.
	CatchUp1, CatchUp2               time.Duration
	Leader2Changed                   bool
	MajorityReqs, MajorityFailed     int
	MinorityReqs, MinorityFailed     int
	MinorityReadyz1, MinorityReadyz2 string
	Slowest                          time.Duration // data-plane request during a partition
	UDPDropped                       int
	Unidentified                     int // connections the net closed, their caller not found
}

func TestPartitions(t *testing.T) {
	bin := BuildRolter(t)
	var runs []partitionRun
	for seed := uint64(1); seed <= partitionSeeds; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runs = append(runs, runPartitions(t, bin, seed))
		})
	}
	for _, r := range runs {
		t.Logf("seed %d: %d writes (%d unknown), %d HTTP attempts (%d retries), %d audited; porcupine %s; "+
			"new leader after P1 in %v, old leader caught up %v after the heal; P2 leader changed %v, follower caught up %v after the heal; data plane majority %d/%d failed, minority %d/%d failed; "+
			"slowest data-plane request in a partition %v; minority /readyz P1 %q P2 %q; %d datagrams dropped, %d connections closed unidentified",
			r.Seed, r.Writes, r.Unknown, r.Attempts, r.Retries, r.Audited, r.Linearizable, r.NewLeader1.Round(time.Millisecond),
			r.CatchUp1.Round(time.Millisecond), r.Leader2Changed, r.CatchUp2.Round(time.Millisecond), r.MajorityFailed, r.MajorityReqs, r.MinorityFailed, r.MinorityReqs,
			r.Slowest.Round(time.Millisecond), r.MinorityReadyz1, r.MinorityReadyz2, r.UDPDropped, r.Unidentified)
	}
}

// dataReq is one data-plane request: which router, when, and whether it
// failed.
type dataReq struct {
	router   int
	at       time.Time
	took     time.Duration
	failed   bool
	whatWent string
}

// window is a partition's span and its minority.
type window struct {
	from, to time.Time
	minority []int
}

func runPartitions(t *testing.T, bin Binary, seed uint64) partitionRun {
	res := partitionRun{Seed: seed}
	dir := t.TempDir()
	engines := []string{StartSim(t, bin, "sim-a", dir), StartSim(t, bin, "sim-b", dir)}
	cfg := fmt.Sprintf(`[[providers]]
name = "e1"
api_base = %q

[[providers]]
name = "e2"
api_base = %q

[[routes]]
model = "chat"
targets = [{ provider = "e1", model = %q }, { provider = "e2", model = %q }]
`, engines[0], engines[1], SimModel, SimModel)
	fn, err := NewFaultNet(3, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fn.Close)
	c := StartCluster(t, ClusterOptions{Bin: bin, N: 3, Dir: dir, Config: cfg,
		Wire: func(i int, r *Router) (string, []string, []string) {
			r.Raft = fn.Node(i).RaftReal
			var seeds []string
			for j := range 3 {
				if j != i {
					seeds = append(seeds, fn.Node(j).GossipFront)
				}
			}
			n := fn.Node(i)
			return n.RaftFront, seeds, []string{"--gossip", n.GossipReal, "--gossip-advertise", n.GossipFront}
		},
		Started: func(i int, r *Router) { fn.SetPID(i, r.Proc.Pid()) },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := waitGossip(ctx, c, 3); err != nil {
		t.Fatalf("gossip through the fault net: %v", err)
	}
	index := func(id string) int { return slices.IndexFunc(c.Routers, func(r *Router) bool { return r.ID == id }) }

	rnd := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	fn.Degrade(time.Duration(10+rnd.IntN(20))*time.Millisecond, 10*time.Millisecond, 0.05, 0.05)

	// Writers: two per router, on four provider names.
	h := NewHistory()
	names := []string{"p0", "p1", "p2", "p3"}
	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := range 6 {
		w := &AdminWriter{ID: i, Admin: c.Routers[i%3].Admin, Token: c.Token, Names: names,
			Rand: rand.New(rand.NewPCG(seed, uint64(i))), Attempt: 2 * time.Second, Deadline: time.Now().Add(2 * time.Minute)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(wctx, h); err != nil {
				errs <- err
			}
		}()
	}
	// Data plane: one client per router, all the time.
	var dmu sync.Mutex
	var reqs []dataReq
	dctx, stopData := context.WithCancel(ctx)
	var dwg sync.WaitGroup
	for i, r := range c.Routers {
		dwg.Add(1)
		go func() {
			defer dwg.Done()
			for dctx.Err() == nil {
				at := time.Now()
				err := chatThrough(r.API)
				dmu.Lock()
				reqs = append(reqs, dataReq{router: i, at: at, took: time.Since(at), failed: err != nil, whatWent: fmt.Sprint(err)})
				dmu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	hold := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	hold(2 * time.Second)

	// P1: the leader alone.
	leader, err := waitLeaderOn(ctx, c, []int{0, 1, 2}, func(id string) bool { return id != "" })
	if err != nil {
		t.Fatal(err)
	}
	l := index(leader)
	var windows []window
	p1 := time.Now()
	fn.Partition([]int{l}, others(l))
	_, err = waitLeaderOn(ctx, c, others(l), func(id string) bool { return id != "" && id != leader })
	if err != nil {
		t.Fatalf("P1: no new leader on the majority: %v", err)
	}
	res.NewLeader1 = time.Since(p1)
	res.MinorityReadyz1 = waitReadyzSays(ctx, c.Routers[l], "no raft leader")
	hold(6 * time.Second)
	windows = append(windows, window{p1, time.Now(), []int{l}})
	res.CatchUp1 = healAndCatchUp(ctx, t, c, fn, l)
	hold(2 * time.Second)

	// P2: a follower alone.
	leader, err = waitLeaderOn(ctx, c, []int{0, 1, 2}, func(id string) bool { return id != "" })
	if err != nil {
		t.Fatal(err)
	}
	f := (index(leader) + 1 + rnd.IntN(2)) % 3
	p2 := time.Now()
	fn.Partition([]int{f}, others(f))
	res.MinorityReadyz2 = waitReadyzSays(ctx, c.Routers[f], "no raft leader")
	hold(6 * time.Second)
	l2, err := waitLeaderOn(ctx, c, others(f), func(id string) bool { return id != "" })
	if err != nil {
		t.Fatalf("P2: the majority lost its leader: %v", err)
	}
	res.Leader2Changed = l2 != leader
	windows = append(windows, window{p2, time.Now(), []int{f}})
	res.CatchUp2 = healAndCatchUp(ctx, t, c, fn, f)
	hold(2 * time.Second)
	fn.Degrade(0, 0, 0, 0)

	// Every operation in flight gets its definite answer (or the
	// writer's deadline), then every router converges and is read.
	stopWriters()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("writer: %v", err)
	}
	stopData()
	dwg.Wait()
	if err := waitConverged(ctx, c); err != nil {
		t.Fatal(err)
	}
	for i, r := range c.Routers {
		if err := ReadAll(ctx, h, 10+i, r.Admin, c.Token, names); err != nil {
			t.Fatal(err)
		}
	}

	ops := h.Ops()
	var info porcupine.LinearizationInfo
	res.Linearizable, info = porcupine.CheckOperationsVerbose(AdminModel(), ops, time.Minute)
	if res.Linearizable != porcupine.Ok {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("rolter-partition-seed%d.html", seed))
		if err := porcupine.VisualizePath(AdminModel(), info, path); err == nil {
			t.Logf("visualization: %s", path)
		}
		t.Errorf("history of %d operations: porcupine says %s", len(ops), res.Linearizable)
	}
	res.Writes, res.Unknown = h.Counts()
	res.Writes += res.Unknown
	res.Attempts, res.Retries = h.Attempts, h.Retries
	audited, err := auditedWrites(ctx, c, names)
	if err != nil {
		t.Fatal(err)
	}
	res.Audited = audited
	// Each logical write reaches the FSM at most once (a retry with its
	// key replays the first answer); every definite one reached it.
	if definite := res.Writes - res.Unknown; audited < definite || audited > res.Writes {
		t.Errorf("%d writes applied by the FSM; %d operations had a definite answer, %d none: "+
			"a write was lost or applied twice", audited, definite, res.Unknown)
	}
	if res.Unknown > 0 {
		t.Errorf("%d operations got no definite answer within two minutes", res.Unknown)
	}

	for _, q := range reqs {
		for _, w := range windows {
			if q.at.Before(w.from) || !q.at.Before(w.to) {
				continue
			}
			res.Slowest = max(res.Slowest, q.took)
			if slices.Contains(w.minority, q.router) {
				res.MinorityReqs++
				if q.failed {
					res.MinorityFailed++
				}
				continue
			}
			res.MajorityReqs++
			if q.failed {
				res.MajorityFailed++
				if res.MajorityFailed <= 3 {
					t.Errorf("majority-side request failed during a partition: router %d at %v: %s", q.router, q.at.Sub(w.from), q.whatWent)
				}
			}
		}
	}
	if res.MajorityReqs == 0 || res.MinorityReqs == 0 {
		t.Errorf("no data-plane requests during the partitions (majority %d, minority %d)", res.MajorityReqs, res.MinorityReqs)
	}
	for _, got := range []string{res.MinorityReadyz1, res.MinorityReadyz2} {
		if !strings.HasPrefix(got, "200 ready, degraded: no raft leader; serving config_version ") {
			t.Errorf("minority /readyz: %q; want 200 saying it serves its last config", got)
		}
	}
	if res.MinorityFailed > 0 {
		t.Errorf("%d of %d minority-side requests failed; the minority serves from its last config", res.MinorityFailed, res.MinorityReqs)
	}
	fn.mu.Lock()
	res.UDPDropped = fn.UDPDropped
	if len(fn.Errors) > 0 {
		t.Errorf("the fault net could not inject every fault: %v", fn.Errors)
	}
	res.Unidentified = fn.Unidentified
	fn.mu.Unlock()
	return res
}

// dataClient waits as long as an overloaded test machine may take: a
// slow answer is measured (partitionRun's Slowest), not failed.
var dataClient = &http.Client{Timeout: 30 * time.Second}

// chatThrough sends one chat request to api and returns why it failed.
func chatThrough(api string) error {
	const body = `{"model":"chat","messages":[{"role":"user","content":"ping"}],"max_tokens":4}`
	resp, err := dataClient.Post(api+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%d %.200s", resp.StatusCode, b)
	}
	return err
}

// healAndCatchUp heals the net and returns how long the router cut off
// (index cut) takes to run the config_version the majority ran at the
// heal; every router must then agree on a leader.
func healAndCatchUp(ctx context.Context, t *testing.T, c *Cluster, fn *FaultNet, cut int) time.Duration {
	t.Helper()
	want, err := metric(ctx, c.Routers[(cut+1)%3], "rolter_config_version")
	if err != nil {
		t.Fatal(err)
	}
	fn.Heal()
	healed := time.Now()
	err = testwait.Poll(60*time.Second, 20*time.Millisecond, func() error {
		got, err := metric(ctx, c.Routers[cut], "rolter_config_version")
		if err == nil && got < want {
			err = fmt.Errorf("%s runs config_version %v, the majority ran %v at the heal", c.Routers[cut].ID, got, want)
		}
		return err
	})
	took := time.Since(healed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitLeaderOn(ctx, c, []int{0, 1, 2}, func(id string) bool { return id != "" }); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
	return took
}

func others(i int) []int {
	var out []int
	for j := range 3 {
		if j != i {
			out = append(out, j)
		}
	}
	return out
}

// waitLeaderOn waits until every router in idx reports one leader that ok
// accepts, and returns it.
func waitLeaderOn(ctx context.Context, c *Cluster, idx []int, ok func(string) bool) (string, error) {
	var leader string
	err := testwait.Poll(30*time.Second, 20*time.Millisecond, func() error {
		leader = ""
		for _, i := range idx {
			l, err := c.LeaderSeenBy(ctx, c.Routers[i])
			if err != nil {
				return err
			}
			if !ok(l) || (leader != "" && l != leader) {
				return fmt.Errorf("%s sees leader %q", c.Routers[i].ID, l)
			}
			leader = l
		}
		return nil
	})
	return leader, err
}

// waitReadyzSays waits until r's /readyz body mentions what and returns
// its status and body ("" on timeout).
func waitReadyzSays(ctx context.Context, r *Router, what string) string {
	var got string
	_ = testwait.Poll(15*time.Second, 50*time.Millisecond, func() error {
		code, b, err := Do(ctx, http.MethodGet, r.Admin+"/readyz", "", "")
		if err != nil {
			return err
		}
		got = fmt.Sprintf("%d %s", code, strings.TrimSpace(string(b)))
		if !strings.Contains(string(b), what) {
			return fmt.Errorf("/readyz: %s", got)
		}
		return nil
	})
	return got
}

// waitGossip waits until every router lists n live routers.
func waitGossip(ctx context.Context, c *Cluster, n int) error {
	return testwait.Poll(30*time.Second, 100*time.Millisecond, func() error {
		for _, r := range c.Routers {
			code, b, err := Do(ctx, http.MethodGet, r.Admin+"/api/v1/cluster", c.Token, "")
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("%s: %d %v", r.ID, code, err)
			}
			var v struct {
				Routers []struct {
					Alive *bool `json:"alive"`
				} `json:"routers"`
			}
			if err := json.Unmarshal(b, &v); err != nil {
				return err
			}
			alive := 0
			for _, x := range v.Routers {
				if x.Alive != nil && *x.Alive {
					alive++
				}
			}
			if alive != n {
				return fmt.Errorf("%s sees %d live routers in gossip", r.ID, alive)
			}
		}
		return nil
	})
}

// waitConverged waits until every router runs one config_version.
func waitConverged(ctx context.Context, c *Cluster) error {
	return testwait.Poll(30*time.Second, 50*time.Millisecond, func() error {
		var want string
		for _, r := range c.Routers {
			code, b, err := Do(ctx, http.MethodGet, r.Admin+"/api/v1/cluster", c.Token, "")
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("%s: %d %v", r.ID, code, err)
			}
			var v struct {
				ConfigVersion json.Number `json:"config_version"`
			}
			if err := json.Unmarshal(b, &v); err != nil {
				return err
			}
			if want != "" && v.ConfigVersion.String() != want {
				return fmt.Errorf("%s at config_version %s, another at %s", r.ID, v.ConfigVersion, want)
			}
			want = v.ConfigVersion.String()
		}
		return nil
	})
}

// auditedWrites counts the provider writes on names the FSM applied (any
// outcome) from the audit log.
func auditedWrites(ctx context.Context, c *Cluster, names []string) (int, error) {
	code, b, err := Do(ctx, http.MethodGet, c.Routers[0].Admin+"/api/v1/audit?limit=10000", c.Token, "")
	if err != nil || code != http.StatusOK {
		return 0, fmt.Errorf("audit: %d %v", code, err)
	}
	var page struct {
		Data []struct {
			Action   string `json:"action"`
			Resource string `json:"resource"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &page); err != nil {
		return 0, err
	}
	n := 0
	for _, e := range page.Data {
		name, ok := strings.CutPrefix(e.Resource, "provider/")
		if ok && strings.HasPrefix(e.Action, "provider.") && slices.Contains(names, name) {
			n++
		}
	}
	return n, nil
}
