package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/sim"
)

// TestShortResumeStreams is scenario 13 in process and small: 3 instant
// sims, one killing half its streams after 5 tokens, 60 openai-go
// streams on a resume_streams route.
func TestShortResumeStreams(t *testing.T) {
	const maxTokens = 12
	var log GenerationLog
	var b strings.Builder
	var targets []string
	for i := range 3 {
		f := sim.Faults{}
		if i == 0 {
			f.DieRate, f.DieAfterTokens = 0.5, 5
		}
		name := fmt.Sprintf("e%d", i)
		fmt.Fprintf(&b, "[[providers]]\nname = %q\napi_base = %q\n\n", name, StartInprocLoggedSim(t, f, &log))
		targets = append(targets, fmt.Sprintf("{ provider = %q, model = %q }", name, sim.DefaultModelName))
	}
	fmt.Fprintf(&b, "[retry]\nbudget = 1.0\n\n[[routes]]\nmodel = \"chat\"\nresume_streams = true\ntargets = [%s]\n", strings.Join(targets, ", "))
	r := StartInprocRouter(t, b.String())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := ResumeRun(ctx, r.API, "chat", "short", 60, 4, maxTokens)
	gens, err := log.Generations()
	if err != nil {
		t.Fatal(err)
	}
	chk := CheckSplices(run.Streams, gens, maxTokens)
	t.Logf("60 streams: %d errors, %d whole, %d resumed", run.Errors, chk.Whole, chk.Resumed)
	if run.Errors != 0 {
		t.Errorf("%d client-visible errors: %q", run.Errors, run.FirstErrors)
	}
	for _, p := range chk.Problems {
		t.Error(p)
	}
	if chk.Resumed == 0 || chk.Whole+chk.Resumed != 60 {
		t.Errorf("%d whole + %d resumed of 60", chk.Whole, chk.Resumed)
	}
}
