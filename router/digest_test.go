package router

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/strategies"
)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// The router makes a request's prompt digest only for the strategies that
// read it (strategies.ReadsPromptDigest). Every registered strategy is
// checked by what it does: a fresh balancer (same seed, same state) is
// asked for the same request under different digests, and its picks may
// differ only if it is listed as reading the digest.
func TestOnlyDigestReadersGetADigest(t *testing.T) {
	targets := make([]strategies.Target, 8)
	for i := range targets {
		targets[i] = strategies.Target{ID: fmt.Sprintf("t%d", i), Provider: fmt.Sprintf("p%d", i), Weight: 1}
	}
	loads := make([]uint64, len(targets))
	for _, name := range strategies.Names() {
		t.Run(name, func(t *testing.T) {
			picked := map[int]bool{}
			for d := uint64(1); d <= 64; d++ {
				lb, err := strategies.Build(name, strategies.Spec{
					Targets: targets, Rand: strategies.NewRand(1), Clock: fixedClock{time.Unix(1e9, 0)},
					Tracker: strategies.NewTracker(), Policy: strategies.NewPolicyHolder(adaptive.DefaultPolicy()),
				})
				if err != nil {
					t.Fatal(err)
				}
				rc := strategies.RouteContext{Model: "m", Prompt: "the same prompt", PromptLen: 15, PromptDigest: d * 0x9E3779B97F4A7C15}
				idx, ok := lb.Pick(&rc, loads)
				if !ok {
					t.Fatal("no pick")
				}
				picked[idx] = true
			}
			reads := len(picked) > 1
			if reads != strategies.ReadsPromptDigest(name) {
				t.Fatalf("picks depend on PromptDigest: %v; strategies.ReadsPromptDigest says %v", reads, strategies.ReadsPromptDigest(name))
			}
		})
	}
}

// Long conversations that share their first 32 KiB (all the prompt text a
// strategy sees) and differ after it are told apart by the digest alone:
// under consistent_hash they spread over the targets, and each one comes
// back to its own target. Under cache_aware the digest is not made.
func TestLongConversationsSpreadByDigestUnderConsistentHash(t *testing.T) {
	var engines []*fakeEngine
	var provs []string
	var targets []string
	for i := range 4 {
		e := newEngine(t, okChat)
		engines = append(engines, e)
		name := fmt.Sprintf("e%d", i)
		provs = append(provs, name, e.URL)
		targets = append(targets, fmt.Sprintf("{provider = %q}", name))
	}
	h := newHarness(t, providers(provs...)+`
[[routes]]
model = "m"
strategy = "consistent_hash"
targets = [`+strings.Join(targets, ", ")+`]
`, nil)
	shared := strings.Repeat("the same long preamble ", 2000) // past the 32 KiB bound
	body := func(i int) string {
		return `{"model":"m","messages":[{"role":"user","content":"` + shared + fmt.Sprintf("question %d", i) + `"}]}`
	}
	hits := func() []int64 {
		out := make([]int64, len(engines))
		for i, e := range engines {
			out[i] = e.hits.Load()
		}
		return out
	}
	home := map[int]int{}
	for i := range 16 {
		before := hits()
		if code, _, b := h.post("/v1/chat/completions", body(i)); code != 200 {
			t.Fatalf("%d %s", code, b)
		}
		for j, n := range hits() {
			if n > before[j] {
				home[i] = j
			}
		}
	}
	used := map[int]bool{}
	for _, j := range home {
		used[j] = true
	}
	if len(used) < 2 {
		t.Fatalf("16 different conversations all went to target %v: the digest did not tell them apart", used)
	}
	for i := range 16 {
		before := hits()
		if code, _, b := h.post("/v1/chat/completions", body(i)); code != 200 {
			t.Fatalf("%d %s", code, b)
		}
		if after := hits(); after[home[i]] != before[home[i]]+1 {
			t.Errorf("conversation %d came back to another target than e%d", i, home[i])
		}
	}
}
