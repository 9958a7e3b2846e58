package scrape

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestParseEngineMetrics(t *testing.T) {
	realistic, err := os.ReadFile("testdata/vllm-metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		text string
		want EngineMetrics
	}{
		{
			name: "vLLM 0.12 with two data-parallel engines",
			text: string(realistic),
			want: EngineMetrics{Running: 5, Waiting: 7, KVUsage: 0.375, PrefixHits: 80765, PrefixQueries: 123456,
				BlockSize: 16, NumGPUBlocks: 27264, MaxLoRAs: 4,
				Adapters:   []string{"chat-adapter", "sql-adapter", "summarize"},
				HasKVUsage: true, HasPrefixStats: true},
		},
		{
			name: "older engine: gpu_cache_usage_perc, counters without _total",
			text: `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 1
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 2
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.9
# TYPE vllm:gpu_prefix_cache_hits counter
vllm:gpu_prefix_cache_hits{model_name="m"} 10
# TYPE vllm:gpu_prefix_cache_queries counter
vllm:gpu_prefix_cache_queries{model_name="m"} 40
`,
			want: EngineMetrics{Running: 1, Waiting: 2, KVUsage: 0.9, PrefixHits: 10, PrefixQueries: 40, HasKVUsage: true, HasPrefixStats: true},
		},
		{
			name: "SGLang queue",
			text: "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\"} 12\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 4\n",
			want: EngineMetrics{Running: 4, Waiting: 12},
		},
		{
			name: "TGI queue",
			text: "# TYPE tgi_queue_size gauge\ntgi_queue_size 3\n",
			want: EngineMetrics{Waiting: 3},
		},
		{
			name: "hostile values are clamped",
			text: "vllm:kv_cache_usage_perc 7\nvllm:num_requests_running -3\nvllm:num_requests_waiting NaN\n",
			want: EngineMetrics{KVUsage: 1, HasKVUsage: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseEngineMetrics(strings.NewReader(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseEngineMetricsRejects(t *testing.T) {
	for name, text := range map[string]string{
		"html page":        "<html><body>not metrics</body></html>",
		"no engine metric": "# TYPE go_goroutines gauge\ngo_goroutines 12\n",
		"empty":            "",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseEngineMetrics(strings.NewReader(text)); !errors.Is(err, ErrScrape) {
				t.Fatalf("want ErrScrape, got %v", err)
			}
		})
	}
}

func TestParseLMCache(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		capacity int64
		want     LMCacheSignal
		wantErr  bool
	}{
		{name: "JSON contract", body: `{"occupancy": 0.42, "cache_available": true}`, want: LMCacheSignal{0.42, true}},
		{name: "JSON unavailable", body: `{"occupancy":0.1,"cache_available":false}`, want: LMCacheSignal{0.1, false}},
		{name: "JSON without availability means available", body: `{"occupancy":0.5}`, want: LMCacheSignal{0.5, true}},
		{name: "JSON saturated beyond 1 clamps", body: `{"occupancy":3,"cache_available":true}`, want: LMCacheSignal{1, true}},
		{name: "JSON without occupancy", body: `{"cache_available":true}`, wantErr: true},
		{name: "JSON garbage", body: `{"occupancy":`, wantErr: true},
		{name: "gauge over capacity", capacity: 1 << 30,
			body: "# TYPE lmcache:local_cache_usage gauge\nlmcache:local_cache_usage{model_name=\"m\",worker_id=\"0\"} 268435456\n",
			want: LMCacheSignal{0.25, true}},
		{name: "gauge over default 5 GiB", body: "lmcache:local_cache_usage 2684354560\n", want: LMCacheSignal{0.5, true}},
		{name: "metrics without the gauge", body: "# TYPE other gauge\nother 1\n", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLMCache([]byte(tc.body), tc.capacity)
			if tc.wantErr {
				if !errors.Is(err, ErrScrape) {
					t.Fatalf("want ErrScrape, got %v (%+v)", err, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
