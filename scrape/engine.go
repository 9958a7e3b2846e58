package scrape

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

var (
	// ErrScrape wraps every failure to read an engine or LMCache signal.
	ErrScrape = errors.New("scrape failed")
	// ErrNoEngineMetrics: the text parsed but holds none of the engine
	// metrics we know (wrong URL, or an engine we do not speak).
	ErrNoEngineMetrics = errors.New("no known engine metrics")
)

// maxScrapeBody bounds what a scrape reads.
const maxScrapeBody = 16 << 20

// EngineMetrics is what one /metrics scrape says about the engine. Values of
// every series of a name (several models, data-parallel engines) are summed,
// except KV usage (the mean) and the LoRA info (the newest series).
type EngineMetrics struct {
	Running, Waiting           uint64
	KVUsage                    float64
	PrefixHits, PrefixQueries  uint64
	BlockSize, NumGPUBlocks    int
	MaxLoRAs                   int
	Adapters                   []string
	HasKVUsage, HasPrefixStats bool
}

// Metric names, newest first; the first present wins.
var (
	namesRunning  = []string{"vllm:num_requests_running", "sglang:num_running_reqs"}
	namesWaiting  = []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size"}
	namesKVUsage  = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}
	namesHits     = []string{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits"}
	namesQueries  = []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries"}
	nameCacheInfo = "vllm:cache_config_info"
	nameLoRAInfo  = "vllm:lora_requests_info"
)

// ParseEngineMetrics reads Prometheus text exposition from an engine.
func ParseEngineMetrics(r io.Reader) (EngineMetrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return EngineMetrics{}, fmt.Errorf("%w: %w", ErrScrape, err)
	}
	var m EngineMetrics
	known := false
	if v, ok := sumOf(fams, namesRunning); ok {
		m.Running, known = toCount(v), true
	}
	if v, ok := sumOf(fams, namesWaiting); ok {
		m.Waiting, known = toCount(v), true
	}
	if f := first(fams, namesKVUsage); f != nil && len(f.Metric) > 0 {
		var sum float64
		for _, s := range f.Metric {
			sum += clamp01(value(s))
		}
		m.KVUsage, m.HasKVUsage, known = sum/float64(len(f.Metric)), true, true
	}
	hits, okH := sumOf(fams, namesHits)
	queries, okQ := sumOf(fams, namesQueries)
	if okH && okQ {
		m.PrefixHits, m.PrefixQueries, m.HasPrefixStats, known = toCount(hits), toCount(queries), true, true
	}
	if f := fams[nameCacheInfo]; f != nil && len(f.Metric) > 0 {
		m.BlockSize = labelInt(f.Metric[0], "block_size")
		m.NumGPUBlocks = labelInt(f.Metric[0], "num_gpu_blocks")
		known = true
	}
	if f := fams[nameLoRAInfo]; f != nil && len(f.Metric) > 0 {
		// One series per distinct label set, valued with its last update
		// time: the newest is the current state.
		newest := f.Metric[0]
		for _, s := range f.Metric[1:] {
			if value(s) > value(newest) {
				newest = s
			}
		}
		m.MaxLoRAs = labelInt(newest, "max_lora")
		set := map[string]bool{}
		for _, l := range []string{"running_lora_adapters", "waiting_lora_adapters"} {
			for _, a := range strings.Split(label(newest, l), ",") {
				if a = strings.TrimSpace(a); a != "" {
					set[a] = true
				}
			}
		}
		for a := range set {
			m.Adapters = append(m.Adapters, a)
		}
		slices.Sort(m.Adapters)
		known = true
	}
	if !known {
		return EngineMetrics{}, fmt.Errorf("%w: %w", ErrScrape, ErrNoEngineMetrics)
	}
	return m, nil
}

func first(fams map[string]*dto.MetricFamily, names []string) *dto.MetricFamily {
	for _, n := range names {
		if f := fams[n]; f != nil {
			return f
		}
	}
	return nil
}

func sumOf(fams map[string]*dto.MetricFamily, names []string) (float64, bool) {
	f := first(fams, names)
	if f == nil {
		return 0, false
	}
	var sum float64
	for _, s := range f.Metric {
		if v := value(s); !math.IsNaN(v) && !math.IsInf(v, 0) && v > 0 {
			sum += v
		}
	}
	return sum, true
}

// value reads a sample whatever its declared type.
func value(s *dto.Metric) float64 {
	switch {
	case s.Gauge != nil:
		return s.Gauge.GetValue()
	case s.Counter != nil:
		return s.Counter.GetValue()
	case s.Untyped != nil:
		return s.Untyped.GetValue()
	}
	return math.NaN()
}

func label(s *dto.Metric, name string) string {
	for _, l := range s.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func labelInt(s *dto.Metric, name string) int {
	v, err := strconv.ParseFloat(label(s, name), 64)
	if err != nil || v < 0 || v > math.MaxInt32 {
		return 0
	}
	return int(v)
}

func toCount(v float64) uint64 {
	if !(v > 0) || math.IsInf(v, 0) {
		return 0
	}
	if v >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(v)
}

func clamp01(v float64) float64 {
	switch {
	case !(v >= 0): // NaN or negative
		return 0
	case v > 1:
		return 1
	}
	return v
}

// Fetch GETs url with a timeout and returns at most maxScrapeBody bytes.
func Fetch(ctx context.Context, client *http.Client, url string) ([]byte, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrScrape, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4, application/json;q=0.9, */*;q=0.1")
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrScrape, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, "", fmt.Errorf("%w: %s answered %s", ErrScrape, url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxScrapeBody+1))
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrScrape, err)
	}
	if len(body) > maxScrapeBody {
		return nil, "", fmt.Errorf("%w: %s body over %d bytes", ErrScrape, url, maxScrapeBody)
	}
	return body, resp.Header.Get("Content-Type"), nil
}
