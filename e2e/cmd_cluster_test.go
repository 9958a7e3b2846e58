package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// clusterTOML is the seed of the multi-process tests: two sim engines
// behind one route.
const clusterTOML = `
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
`

// TestRouterProcessCluster is the short version of issue 6's multi-process
// acceptance (the full one: go test -tags e2e ./e2e/): three `rolter
// router` processes and two `rolter sim` engines on loopback; policy
// changes made on followers reach every router; killing the leader loses
// no acknowledged write, applies none twice, and the data plane serves
// every request through the election.
func TestRouterProcessCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five processes")
	}
	bin := SharedRolter(t, false)
	dir := t.TempDir()
	simA := StartSim(t, bin, "sim-a", dir)
	simB := StartSim(t, bin, "sim-b", dir)
	c := StartCluster(t, ClusterOptions{Bin: bin, N: 3, Dir: dir, Config: fmt.Sprintf(clusterTOML, simA, simB)})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	prop, err := PolicyPropagation(ctx, c, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("policy PUT on a follower visible on all 3 routers: p50 %v, max %v over %d changes",
		Percentile(prop, 0.5), Percentile(prop, 1), len(prop))

	res, err := LeaderKill(ctx, c, 40, 20, "chat")
	t.Logf("killed leader %s; new leader %s after %v; writes acked %d, lost %d, duplicated %d, unacked %d, retries %d; "+
		"chat requests during the election %d, failed %d %v",
		res.Killed, res.NewLeader, res.Election, res.Acked, res.Lost, res.Duplicated, res.Unacked, res.Retries,
		res.Load.Requests, res.Load.Failed, res.Load.FirstErrors)
	if err != nil {
		t.Fatal(err)
	}
	if res.Lost != 0 || res.Duplicated != 0 || res.Unacked != 0 || res.Acked != 40 {
		t.Fatalf("writes: %+v", res)
	}
	if res.Load.Requests == 0 || res.Load.Failed != 0 {
		t.Fatalf("data plane during the election: %d of %d requests failed: %v", res.Load.Failed, res.Load.Requests, res.Load.FirstErrors)
	}
}
