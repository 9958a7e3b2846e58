//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

// TestResumeStreams is issue 17's acceptance run: a `rolter router
// --standalone` process in front of 3 `rolter sim` engines, one of which
// kills 30% of its streams right after their 5th token. 300 streamed chat
// requests through the official openai-go client on a route with
// resume_streams on must all succeed, each with exactly the text the two
// engines generated (their generation logs) and with usage; the same run
// on a route with it off shows today's terminal errors.
func TestResumeStreams(t *testing.T) {
	const (
		streams   = 300
		workers   = 8
		maxTokens = 24
	)
	bin := BuildRolter(t)
	dir := t.TempDir()
	var logs []string
	var b strings.Builder
	for i := range 3 {
		name := fmt.Sprintf("e%d", i)
		log := filepath.Join(dir, name+".generations")
		logs = append(logs, log)
		args := []string{"--speed", "1", "--seed", fmt.Sprint(i + 1), "--generation-log", log}
		if i == 0 {
			args = append(args, "--fault-die-rate", "0.3", "--fault-die-after-tokens", "5")
		}
		url, _ := StartSimArgs(t, bin, "sim-"+name, dir, args...)
		fmt.Fprintf(&b, "[[providers]]\nname = %q\napi_base = %q\n\n", name, url)
	}
	targets := `[{ provider = "e0", model = "` + SimModel + `" }, { provider = "e1", model = "` + SimModel +
		`" }, { provider = "e2", model = "` + SimModel + `" }]`
	// Resumes spend the retry budget: a fleet where one stream in ten
	// breaks wants more than the default 0.2 tokens per request.
	fmt.Fprintf(&b, `[retry]
resume_streams = true
budget = 0.5

[[routes]]
model = "chat"
strategy = "round_robin"
targets = %s

[[routes]]
model = "plain"
strategy = "round_robin"
resume_streams = false
targets = %s
`, targets, targets)
	cfgPath := filepath.Join(dir, "rolter.toml")
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := FreeAddrs(t, 2)
	proc := Start(t, bin, "router", dir, "router", "--standalone", "--config", cfgPath, "--http", addrs[0], "--admin", addrs[1])
	api, admin := "http://"+addrs[0], "http://"+addrs[1]
	if err := testwait.Poll(30*time.Second, 50*time.Millisecond, func() error {
		code, _, err := Do(context.Background(), "GET", admin+"/readyz", "", "")
		if err == nil && code != 200 {
			err = fmt.Errorf("readyz %d", code)
		}
		return err
	}); err != nil {
		t.Fatalf("router: %v\n%s", err, proc.Tail(2000))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	t.Run("resume on", func(t *testing.T) {
		run := ResumeRun(ctx, api, "chat", "on", streams, workers, maxTokens)
		gens, err := ReadGenerations(logs...)
		if err != nil {
			t.Fatal(err)
		}
		chk := CheckSplices(run.Streams, gens, maxTokens)
		resumed, err := MetricSample(ctx, admin, `rolter_stream_resumes_total{model="chat",outcome="resumed"}`)
		if err != nil {
			t.Fatal(err)
		}
		failed, _ := MetricSample(ctx, admin, `rolter_stream_resumes_total{model="chat",outcome="failed"}`)
		notResumable, _ := MetricSample(ctx, admin, `rolter_stream_resumes_total{model="chat",outcome="not_resumable"}`)
		ms := func(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }
		t.Logf("resume on: %d streams in %v: %d client-visible errors, %d whole, %d resumed after the engine died "+
			"(metric: %v resumed, %v failed, %v not_resumable), %d splice problems",
			streams, run.Elapsed.Round(time.Millisecond), run.Errors, chk.Whole, chk.Resumed, resumed, failed, notResumable, len(chk.Problems))
		t.Logf("stream duration p50/max: whole %s/%s, resumed %s/%s; longest pause between tokens p50/max: whole %s/%s, resumed %s/%s",
			ms(Quantile(chk.WholeElapsed, 0.5)), ms(Quantile(chk.WholeElapsed, 1)), ms(Quantile(chk.ResumedElapsed, 0.5)), ms(Quantile(chk.ResumedElapsed, 1)),
			ms(Quantile(chk.WholeGap, 0.5)), ms(Quantile(chk.WholeGap, 1)), ms(Quantile(chk.ResumedGap, 0.5)), ms(Quantile(chk.ResumedGap, 1)))
		if failed != 0 || notResumable != 0 {
			t.Errorf("%v breaks failed to resume, %v were not resumable", failed, notResumable)
		}
		if run.Errors != 0 {
			t.Errorf("%d client-visible errors, e.g. %q", run.Errors, run.FirstErrors)
		}
		for _, p := range chk.Problems {
			t.Error(p)
		}
		if chk.Whole+chk.Resumed != streams {
			t.Errorf("%d whole + %d resumed of %d streams", chk.Whole, chk.Resumed, streams)
		}
		if chk.Resumed == 0 || float64(chk.Resumed) != resumed {
			t.Errorf("%d resumed streams, rolter_stream_resumes_total says %v", chk.Resumed, resumed)
		}
		// One log line per resume, naming both engines and what was carried.
		logged, err := os.ReadFile(proc.Log)
		if err != nil {
			t.Fatal(err)
		}
		lines := 0
		for line := range strings.SplitSeq(string(logged), "\n") {
			if !strings.Contains(line, `msg="stream resumed on another engine"`) {
				continue
			}
			lines++
			if !strings.Contains(line, "from=e0") || !(strings.Contains(line, "to=e1") || strings.Contains(line, "to=e2")) ||
				!strings.Contains(line, "tokens_carried=5") {
				t.Errorf("resume log line %q: want from=e0, to=e1 or e2, tokens_carried=5", line)
			}
		}
		if lines != chk.Resumed {
			t.Errorf("%d resume log lines for %d resumed streams", lines, chk.Resumed)
		}
	})

	t.Run("resume off", func(t *testing.T) {
		run := ResumeRun(ctx, api, "plain", "off", streams, workers, maxTokens)
		gens, err := ReadGenerations(logs...)
		if err != nil {
			t.Fatal(err)
		}
		died := 0
		for _, s := range run.Streams {
			lines := gens[s.RequestID]
			if len(lines) == 1 && lines[0].Outcome == "died" {
				died++
				if s.Err == nil || !strings.Contains(s.Err.Error(), "upstream_stream_error") {
					t.Errorf("%s died on its engine, the client got %v", s.RequestID, s.Err)
				}
			}
		}
		t.Logf("resume off: %d streams in %v: %d died on their engine, %d client-visible errors, e.g. %q",
			streams, run.Elapsed.Round(time.Millisecond), died, run.Errors, run.FirstErrors)
		if died == 0 || run.Errors != died {
			t.Errorf("%d streams died, %d client errors: want every death to reach the client as the terminal error", died, run.Errors)
		}
	})
}
