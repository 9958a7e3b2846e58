package fleet

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rolter/rolter/sim"
	simfleet "github.com/rolter/rolter/sim/fleet"
	"github.com/rolter/rolter/sim/workload"
)

// timing is one replayed request as both ends saw it: the client's
// send and result, and the engine's own account from its generation
// log (engine < 0 when no engine logged it as done).
type timing struct {
	index, router, engine int
	prompt                int
	sent                  time.Time
	client                workload.Result
	eng                   sim.EngineTimes
}

// genLogPath is engine j's generation log in a run's directory.
func genLogPath(dir, id string) string { return filepath.Join(dir, "gen-"+id+".jsonl") }

// readGenLogs joins the engines' generation logs to the replay's results
// by request id (the request's index, sent as X-Request-Id).
func readGenLogs(paths []string, results []workload.Result, routers int, prompts []int) ([]timing, error) {
	out := make([]timing, len(results))
	for i, r := range results {
		out[i] = timing{index: i, router: i % routers, engine: -1, prompt: prompts[i], sent: r.Sent, client: r}
	}
	for j, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var g sim.Generation
			if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			i, err := strconv.Atoi(g.RequestID)
			if err != nil || i < 0 || i >= len(out) || g.Engine == nil {
				continue
			}
			out[i].engine, out[i].eng = j, *g.Engine
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	return out, nil
}

// writeTimings writes the joined per-request table as CSV (times in ms;
// engine times on the engine's clock, wall times from the replay's first
// send), for looking into a run.
func writeTimings(path string, ts []timing, speed float64, pred []simfleet.Timing) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	var t0 time.Time
	for _, t := range ts {
		if t0.IsZero() || (!t.sent.IsZero() && t.sent.Before(t0)) {
			t0 = t.sent
		}
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "index,router,engine,prompt_tokens,cached_tokens,sent_wall_ms,submitted_wall_ms,client_ttft_engine_ms,engine_arrival_ms,engine_ttft_ms,engine_latency_ms,error,predicted_engine,predicted_arrival_ms,predicted_ttft_ms,predicted_cached_tokens")
	wall := func(t time.Time) float64 { return ms(t.Sub(t0)) }
	for _, t := range ts {
		e := t.eng
		p := simfleet.Timing{Engine: -1}
		if t.index < len(pred) {
			p = pred[t.index]
		}
		fmt.Fprintf(w, "%d,%d,%d,%d,%d,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%s,%d,%.1f,%.1f,%d\n", t.index, t.router, t.engine, t.prompt, e.CachedTokens,
			wall(t.sent), wall(time.Unix(0, e.Submitted)), speed*ms(t.client.TTFT), ms(time.Duration(e.Arrival)),
			ms(time.Duration(e.FirstToken-e.Arrival)), ms(time.Duration(e.Finish-e.Arrival)), t.client.Err,
			p.Engine, ms(p.Arrival), ms(p.FirstToken-p.Arrival), p.CachedTokens)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
