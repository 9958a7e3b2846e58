package workload

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/sim"
	"github.com/rolter/rolter/sim/tokenizer"
)

const traceSample = `{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]}
{"timestamp": 0, "input_length": 700, "output_length": 4, "hash_ids": [0, 3]}
{"timestamp": 1000, "input_length": 1500, "output_length": 3, "hash_ids": [0, 1, 2]}
`

func TestTraceSharesPrefixesByHashID(t *testing.T) {
	recs, err := ReadTrace(strings.NewReader(traceSample), 0)
	if err != nil || len(recs) != 3 {
		t.Fatalf("read: %v %d", err, len(recs))
	}
	a, b, c := recs[0].Tokens(), recs[1].Tokens(), recs[2].Tokens()
	if len(a) != 1100 || len(c) != 1500 {
		t.Fatalf("lengths %d %d", len(a), len(c))
	}
	if !slices.Equal(a[:512], b[:512]) || slices.Equal(a[512:700], b[512:700]) {
		t.Fatal("hash id 0 shared, 1 vs 3 must differ")
	}
	if !slices.Equal(a, c[:1100]) {
		t.Fatal("same hash ids must give the same tokens")
	}
	// Text form: each hash id block is 512 one-token words.
	ta := tokenizer.Encode(nil, recs[0].Text())
	tc := tokenizer.Encode(nil, recs[2].Text())
	if len(ta) != 1100 || !slices.Equal(ta, tc[:1100]) {
		t.Fatalf("text tokens %d, shared prefix broken", len(ta))
	}
	reqs := FromTrace(recs, false)
	if reqs[2].At != time.Second || reqs[2].MaxTokens != 3 {
		t.Fatalf("request %+v", reqs[2].At)
	}
	if _, err := ReadTrace(strings.NewReader("{bad"), 0); err == nil {
		t.Fatal("malformed trace accepted")
	}
}

func TestGeneratorsDeterministicAndShaped(t *testing.T) {
	for _, name := range []string{"chat", "rag", "lora"} {
		t.Run(name, func(t *testing.T) {
			a, err := Synthetic(name, 7, 200, 10)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := Synthetic(name, 7, 200, 10)
			if len(a) != 200 {
				t.Fatalf("%d requests", len(a))
			}
			for i := range a {
				if !slices.Equal(a[i].Tokens, b[i].Tokens) || a[i].At != b[i].At || a[i].Model != b[i].Model {
					t.Fatalf("request %d differs between runs", i)
				}
				if i > 0 && a[i].At < a[i-1].At {
					t.Fatal("not in time order")
				}
			}
		})
	}
	t.Run("chat turns extend their history", func(t *testing.T) {
		rs := Chat{Seed: 1, Sessions: 1, Turns: 3, SystemPrompts: 1, SystemTokens: 50, UserTokens: 10, OutputTokens: 10, ThinkTime: time.Second}.Generate()
		for i := 1; i < len(rs); i++ {
			prev := rs[i-1].Tokens
			n := len(prev) - 5 // the assistant header differs
			if !slices.Equal(prev[:n], rs[i].Tokens[:n]) {
				t.Fatalf("turn %d does not extend turn %d", i, i-1)
			}
		}
	})
	t.Run("lora popularity is zipf", func(t *testing.T) {
		rs := LoraMix{Seed: 3, Requests: 2000, Adapters: 50, ZipfS: 1.2, PrefixTokens: 4, PromptTokens: 4, OutputTokens: 1}.Generate()
		count := map[string]int{}
		for _, r := range rs {
			count[r.Model]++
		}
		if count[AdapterName(0)] <= count[AdapterName(1)] || count[AdapterName(1)] <= count[AdapterName(10)] || len(count) < 10 {
			t.Fatalf("counts %v", count)
		}
	})
	if _, err := Synthetic("nope", 1, 1, 1); err == nil {
		t.Fatal("unknown generator accepted")
	}
}

func TestReplayAgainstSim(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.Engine.Instant = true
	s := sim.New(cfg, nil, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	ts := httptest.NewServer(s.Handler())
	defer func() { ts.Close(); cancel(); <-done }()

	recs, _ := ReadTrace(strings.NewReader(traceSample), 0)
	for _, mode := range []Mode{ModeCompletions, ModeChat} {
		t.Run(string(mode), func(t *testing.T) {
			q0, h0, ok := PrefixCacheCounters(ctx, nil, ts.URL)
			if !ok {
				t.Fatal("no prefix cache counters")
			}
			res := Replay(ctx, ReplayConfig{Target: ts.URL, Mode: mode, Speed: 10}, FromTrace(recs, mode == ModeChat))
			rep := Summarize(res)
			if rep.OK != 3 || rep.OutputTokens != 12 {
				t.Fatalf("report %+v results %+v", rep, res)
			}
			q1, h1, _ := PrefixCacheCounters(ctx, nil, ts.URL)
			if q1-q0 < 3300 || h1-h0 < 1024 {
				t.Fatalf("queries +%v hits +%v: shared hash ids did not hit", q1-q0, h1-h0)
			}
			var sb strings.Builder
			rep.Print(&sb, 10)
			if !strings.Contains(sb.String(), "p99") {
				t.Fatal(sb.String())
			}
		})
	}
}
