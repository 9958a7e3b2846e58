package fleet

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rolter/rolter/sim"
	"github.com/rolter/rolter/sim/workload"
)

// The engines' generation logs join the replay's results by request id:
// each request gets the engine that logged it done and that engine's
// times; lines without an id of the replay, or not done, are left out.
func TestGenLogsJoinTheReplayByRequestID(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, gens ...sim.Generation) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gens {
			b, _ := json.Marshal(g)
			f.Write(append(b, '\n'))
		}
		f.Close()
		return p
	}
	done := func(id string, arrival, first time.Duration) sim.Generation {
		return sim.Generation{RequestID: id, Outcome: "done",
			Engine: &sim.EngineTimes{Arrival: int64(arrival), FirstToken: int64(first), Finish: int64(first + time.Second), CachedTokens: 16}}
	}
	a := write("a.jsonl", done("1", time.Second, 3*time.Second), sim.Generation{RequestID: "0", Outcome: "client_left"})
	b := write("b.jsonl", done("0", 0, 500*time.Millisecond), done("other", 0, time.Second), done("7", 0, time.Second))
	results := []workload.Result{{TTFT: time.Millisecond}, {TTFT: 2 * time.Millisecond}, {Err: "http 503"}}
	ts, err := readGenLogs([]string{a, b}, results, 2, []int{100, 200, 300})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		engine, router, prompt int
		ttft                   time.Duration
	}{{1, 0, 100, 500 * time.Millisecond}, {0, 1, 200, 2 * time.Second}, {-1, 0, 300, 0}}
	for i, w := range want {
		got := ts[i]
		if got.engine != w.engine || got.router != w.router || got.prompt != w.prompt ||
			time.Duration(got.eng.FirstToken-got.eng.Arrival) != w.ttft || got.client.TTFT != results[i].TTFT {
			t.Errorf("request %d: engine %d router %d prompt %d ttft %v, want %+v", i, got.engine, got.router, got.prompt,
				time.Duration(got.eng.FirstToken-got.eng.Arrival), w)
		}
	}
}
