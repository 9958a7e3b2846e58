//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

const acceptanceTOML = `
[[providers]]
name = "sim-a"
api_base = "%s"

[[providers]]
name = "sim-b"
api_base = "%s"

[[routes]]
model = "chat"
strategy = "round_robin"
targets = [
  { provider = "sim-a", model = "meta-llama/Llama-3.1-8B-Instruct" },
  { provider = "sim-b", model = "meta-llama/Llama-3.1-8B-Instruct" },
]

[[routes]]
model = "adapt"
strategy = "adaptive"
targets = [
  { provider = "sim-a", model = "meta-llama/Llama-3.1-8B-Instruct" },
  { provider = "sim-b", model = "meta-llama/Llama-3.1-8B-Instruct" },
]
`

// TestRaftClusterAcceptance is issue 6's multi-process acceptance with the
// built rolter binary: 3 routers, 2 sim engines, all on loopback.
//   - a policy PUT on a follower is visible on every router within 1 s
//     (p99 over 50 changes);
//   - killing the leader (SIGKILL) yields a new leader within 3 s;
//   - of 200 acknowledged writes made around the kill none is lost and
//     none applied twice;
//   - chat requests to the surviving routers see 0 failures throughout;
//   - every router's adaptive telemetry reaches every router (15 s push)
//     and every /metrics carries the rolter_adaptive_routing_* series.
func TestRaftClusterAcceptance(t *testing.T) {
	bin := BuildRolter(t)
	dir := t.TempDir()
	simA := StartSim(t, bin, "sim-a", dir)
	simB := StartSim(t, bin, "sim-b", dir)
	c := StartCluster(t, ClusterOptions{Bin: bin, N: 3, Dir: dir, Config: fmt.Sprintf(acceptanceTOML, simA, simB)})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	prop, err := PolicyPropagation(ctx, c, 50)
	if err != nil {
		t.Fatal(err)
	}
	p99 := Percentile(prop, 0.99)
	t.Logf("policy PUT on a follower visible on all 3 routers: p50 %v, p99 %v, max %v over %d changes",
		Percentile(prop, 0.5), p99, Percentile(prop, 1), len(prop))
	if p99 > time.Second {
		t.Errorf("policy propagation p99 %v > 1s", p99)
	}

	err = testwait.Poll(40*time.Second, 250*time.Millisecond, func() error {
		for _, r := range c.Routers {
			code, b, err := Do(ctx, http.MethodGet, r.Admin+"/metrics", "", "")
			if err != nil || code != http.StatusOK || !strings.Contains(string(b), `rolter_adaptive_routing_engaged{model="adapt"}`) {
				return fmt.Errorf("%s /metrics lacks the adaptive series (%d %v)", r.ID, code, err)
			}
			code, b, err = Do(ctx, http.MethodGet, r.Admin+"/api/v1/adaptive-routing-telemetry", c.Token, "")
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("%s telemetry: %d %v", r.ID, code, err)
			}
			var view struct {
				Routes []struct {
					Model string `json:"model"`
					Nodes []struct {
						NodeID string `json:"node_id"`
					} `json:"nodes"`
				} `json:"routes"`
			}
			if err := json.Unmarshal(b, &view); err != nil {
				return err
			}
			if len(view.Routes) != 1 || view.Routes[0].Model != "adapt" || len(view.Routes[0].Nodes) != len(c.Routers) {
				return fmt.Errorf("%s telemetry: %s", r.ID, b)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("adaptive telemetry of all %d routers readable on each", len(c.Routers))

	// The route page's figures ride the same push: chats sent through
	// every router add up on each, and each router's row in the cluster
	// view carries its admin address and build.
	const chats = 30
	for i := range chats {
		r := c.Routers[i%len(c.Routers)]
		code, b, err := Do(ctx, http.MethodPost, r.API+"/v1/chat/completions", "",
			`{"model":"chat","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`)
		if err != nil || code != http.StatusOK {
			t.Fatalf("chat via %s: %d %v %.200s", r.ID, code, err, b)
		}
	}
	start := time.Now()
	err = testwait.Poll(40*time.Second, 500*time.Millisecond, func() error {
		for _, r := range c.Routers {
			code, b, err := Do(ctx, http.MethodGet, r.Admin+"/api/v1/route-stats", c.Token, "")
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("%s route-stats: %d %v", r.ID, code, err)
			}
			var v struct {
				Routes []struct {
					Pool    string   `json:"pool"`
					Nodes   []string `json:"nodes"`
					Windows map[string]struct {
						Requests int `json:"requests"`
					} `json:"windows"`
				} `json:"routes"`
			}
			if err := json.Unmarshal(b, &v); err != nil {
				return err
			}
			found := false
			for _, rv := range v.Routes {
				if rv.Pool == "chat" {
					found = true
					if len(rv.Nodes) != len(c.Routers) || rv.Windows["5m"].Requests < chats {
						return fmt.Errorf("%s route-stats for chat: %d routers, %d requests", r.ID, len(rv.Nodes), rv.Windows["5m"].Requests)
					}
				}
			}
			if !found {
				return fmt.Errorf("%s route-stats lacks chat: %s", r.ID, b)
			}
			code, b, err = Do(ctx, http.MethodGet, r.Admin+"/api/v1/cluster", c.Token, "")
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("%s cluster: %d %v", r.ID, code, err)
			}
			var cv struct {
				Routers []struct {
					NodeID    string `json:"node_id"`
					AdminAddr string `json:"admin_addr"`
					Build     string `json:"build"`
				} `json:"routers"`
			}
			if err := json.Unmarshal(b, &cv); err != nil {
				return err
			}
			for _, row := range cv.Routers {
				var want string
				for _, o := range c.Routers {
					if o.ID == row.NodeID {
						want = strings.TrimPrefix(o.Admin, "http://")
					}
				}
				if row.AdminAddr != want || row.Build == "" {
					return fmt.Errorf("%s cluster row %s: admin_addr %q (want %q), build %q", r.ID, row.NodeID, row.AdminAddr, want, row.Build)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("route stats of %d chats through %d routers summed on each after %v; every cluster row has its admin address and build",
		chats, len(c.Routers), time.Since(start).Round(100*time.Millisecond))

	res, err := LeaderKill(ctx, c, 200, 100, "chat")
	t.Logf("killed leader %s; new leader %s after %v; writes acked %d, lost %d, duplicated %d, unacked %d, retries %d; "+
		"chat requests to survivors during the run %d, failed %d %v",
		res.Killed, res.NewLeader, res.Election, res.Acked, res.Lost, res.Duplicated, res.Unacked, res.Retries,
		res.Load.Requests, res.Load.Failed, res.Load.FirstErrors)
	if err != nil {
		t.Fatal(err)
	}
	if res.Election > 3*time.Second {
		t.Errorf("new leader after %v > 3s", res.Election)
	}
	if res.Acked != 200 || res.Lost != 0 || res.Duplicated != 0 || res.Unacked != 0 {
		t.Errorf("writes: %+v", res)
	}
	if res.Load.Requests == 0 || res.Load.Failed != 0 {
		t.Errorf("data plane: %d of %d requests failed: %v", res.Load.Failed, res.Load.Requests, res.Load.FirstErrors)
	}
}
