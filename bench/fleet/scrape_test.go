package fleet

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestScrapeSumsSamplesOverLabels(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`# HELP vllm:prefix_cache_hits_total Prefix cache hits.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 512
vllm:prefix_cache_hits_total{engine="1",model_name="m b}"} 1024
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 3
process_open_fds 9
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.5e+00
`))
	}))
	defer srv.Close()
	m, err := scrape(context.Background(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"vllm:prefix_cache_hits_total": 1536, "vllm:request_success_total": 3,
		"process_open_fds": 9, "vllm:time_to_first_token_seconds_sum": 1.5}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, m[k], v, m)
		}
	}
}
