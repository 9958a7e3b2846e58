package sim

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rolter/rolter/sim/engine"
)

// bytesPerToken is the KV footprint of one Llama-3.1-8B token in BF16
// (32 layers × 8 KV heads × 128 dims × K,V × 2 bytes), used to express the
// CPU tier in bytes as LMCache does.
const bytesPerToken = 128 * 1024

// collector exposes the engine's state under vLLM's metric names, read
// from one engine snapshot per scrape.
type collector struct {
	s *Server

	running, waiting, usage, usageOld, queries, hits, info, lora *prometheus.Desc
	preempt, promptTok, genTok, lmUsage, lmCap, lmHits           *prometheus.Desc
}

func newCollector(s *Server) *collector {
	l := []string{"model_name", "engine"}
	d := func(name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append(append([]string{}, l...), extra...), nil)
	}
	return &collector{
		s:         s,
		running:   d("vllm:num_requests_running", "Number of requests in model execution batches."),
		waiting:   d("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
		usage:     d("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
		usageOld:  d("vllm:gpu_cache_usage_perc", "GPU KV-cache usage (pre-0.12 name)."),
		queries:   d("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		hits:      d("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
		info:      prometheus.NewDesc("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.", []string{"block_size", "num_gpu_blocks", "enable_prefix_caching", "engine"}, nil),
		lora:      prometheus.NewDesc("vllm:lora_requests_info", "Running stats on lora requests.", []string{"max_lora", "running_lora_adapters", "waiting_lora_adapters", "engine"}, nil),
		preempt:   d("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine."),
		promptTok: d("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		genTok:    d("vllm:generation_tokens_total", "Number of generation tokens processed."),
		lmUsage:   prometheus.NewDesc("lmcache:local_cache_usage", "Bytes held by the LMCache local CPU tier.", nil, nil),
		lmCap:     prometheus.NewDesc("lmcache:local_cache_capacity", "Configured capacity of the LMCache local CPU tier in bytes (max_local_cpu_size).", nil, nil),
		lmHits:    prometheus.NewDesc("lmcache:num_hit_tokens_total", "Tokens retrieved from the LMCache CPU tier.", nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.running, c.waiting, c.usage, c.usageOld, c.queries, c.hits, c.info, c.lora, c.preempt, c.promptTok, c.genTok} {
		ch <- d
	}
	if c.s.cfg.LMCache {
		ch <- c.lmUsage
		ch <- c.lmCap
		ch <- c.lmHits
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	var st engine.Stats
	c.s.drv.with(func(e *engine.Engine) { st = e.Stats() })
	m, eng := c.s.cfg.Model, "0"
	g := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, m, eng)
	}
	cnt := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), m, eng)
	}
	usage := 0.0
	if st.TotalBlocks > 0 {
		usage = float64(st.UsedBlocks) / float64(st.TotalBlocks)
	}
	g(c.running, float64(st.Running))
	g(c.waiting, float64(st.Waiting))
	g(c.usage, usage)
	g(c.usageOld, usage)
	cnt(c.queries, st.PrefixQueries)
	cnt(c.hits, st.PrefixHits)
	cnt(c.preempt, st.Preemptions)
	cnt(c.promptTok, st.PromptTokens)
	cnt(c.genTok, st.GeneratedTokens)
	cfg := c.s.drv.eng.Config()
	ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1,
		strconv.Itoa(cfg.BlockSize), strconv.Itoa(cfg.KVBlocks), "True", eng)
	ch <- prometheus.MustNewConstMetric(c.lora, prometheus.GaugeValue, float64(time.Now().Unix()),
		strconv.Itoa(cfg.MaxLoras), strings.Join(st.RunningLoras, ","), strings.Join(st.WaitingLoras, ","), eng)
	if c.s.cfg.LMCache {
		bs := float64(cfg.BlockSize * bytesPerToken)
		ch <- prometheus.MustNewConstMetric(c.lmUsage, prometheus.GaugeValue, float64(st.CPUUsedBlocks)*bs)
		ch <- prometheus.MustNewConstMetric(c.lmCap, prometheus.GaugeValue, float64(st.CPUTotalBlocks)*bs)
		ch <- prometheus.MustNewConstMetric(c.lmHits, prometheus.CounterValue, float64(st.CPUHitTokens))
	}
}

// latency holds the request histograms, observed in simulated (engine)
// seconds, as a real engine of this speed would report them.
type latency struct {
	ttft, e2e *prometheus.HistogramVec
	success   *prometheus.CounterVec
}

func newLatency(reg prometheus.Registerer) *latency {
	buckets := []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	l := &latency{
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vllm:time_to_first_token_seconds",
			Help: "Histogram of time to first token in seconds.", Buckets: buckets}, []string{"model_name", "engine"}),
		e2e: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vllm:e2e_request_latency_seconds",
			Help: "Histogram of end to end request latency in seconds.", Buckets: buckets}, []string{"model_name", "engine"}),
		success: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total",
			Help: "Count of successfully processed requests."}, []string{"model_name", "engine", "finished_reason"}),
	}
	reg.MustRegister(l.ttft, l.e2e, l.success)
	return l
}

func (l *latency) observe(model string, c engine.Completion) {
	l.ttft.WithLabelValues(model, "0").Observe(c.TTFT().Seconds())
	l.e2e.WithLabelValues(model, "0").Observe(c.Latency().Seconds())
	l.success.WithLabelValues(model, "0", "length").Inc()
}
