package fleet

import (
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/rolter/rolter/sim/engine"
	"github.com/rolter/rolter/sim/workload"
	"github.com/rolter/rolter/strategies"
)

// Two runs of one configuration give the same result, figure for figure
// and request by request, for every strategy: `rolter bench routing` with
// one seed prints one table whatever else runs beside it. The runs go at
// once, as bench routing's parallel simulations do; the workloads have
// sessions, shared prefixes and LoRA adapters.
func TestEveryStrategySameConfigSameResult(t *testing.T) {
	workloads := map[string]*Workload{}
	for _, name := range []string{"chat", "lora"} {
		reqs, err := workload.Synthetic(name, 4, 100, 1)
		if err != nil {
			t.Fatal(err)
		}
		workloads[name] = mustPrepare(t, FromWorkload(reqs))
	}
	for wname, w := range workloads {
		rate := 0.8 * Capacity(w, 4, engine.Config{})
		for _, name := range strategies.Names() {
			t.Run(wname+"/"+name, func(t *testing.T) {
				t.Parallel()
				cfg := Config{Strategy: name, Engines: 4, Routers: 3, Rate: rate, Seed: 9, Arrival: RandomArrival,
					GossipDelay: 250 * time.Millisecond}
				var res [2]Result
				var wg sync.WaitGroup
				for i := range res {
					wg.Add(1)
					go func() { defer wg.Done(); res[i] = mustRun(t, cfg, w) }()
				}
				wg.Wait()
				if !reflect.DeepEqual(res[0], res[1]) {
					for i := range res[0].Timings {
						if res[0].Timings[i] != res[1].Timings[i] {
							t.Fatalf("same config, different runs: request %d %+v then %+v (TTFT p90 %v and %v)",
								i, res[0].Timings[i], res[1].Timings[i], res[0].TTFT.P90, res[1].TTFT.P90)
						}
					}
					t.Fatalf("same config, different runs:\n%+v\n%+v", res[0], res[1])
				}
			})
		}
	}
}
