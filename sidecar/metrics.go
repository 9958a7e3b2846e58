package sidecar

import (
	"encoding/json"
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rolter/rolter/cluster/mesh"
)

// newHandler builds the sidecar's own registry and its /metrics and
// /healthz endpoints. Every metric reads the live counters at scrape time.
func (s *Sidecar) newHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.opts.Collectors...)
	counter := func(name, help string, labels prometheus.Labels, v *atomic.Uint64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(v.Load()) }))
	}
	gauge := func(name, help string, labels prometheus.Labels, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f))
	}
	st := s.stats
	const evHelp = "KV-cache events applied, by type."
	counter("rolter_kv_events_total", evHelp, prometheus.Labels{"type": "BlockStored"}, &st.Stored)
	counter("rolter_kv_events_total", evHelp, prometheus.Labels{"type": "BlockRemoved"}, &st.Removed)
	counter("rolter_kv_events_total", evHelp, prometheus.Labels{"type": "AllBlocksCleared"}, &st.Cleared)
	counter("rolter_kv_events_malformed_total", "KV-event messages dropped as undecodable.", nil, &st.Malformed)
	counter("rolter_kv_event_messages_total", "KV-event messages received (after the topic filter).", nil, &st.Messages)
	counter("rolter_kv_event_gaps_total", "KV-event sequence gaps detected.", nil, &st.Gaps)
	counter("rolter_kv_event_gaps_repaired_total", "KV-event sequence gaps closed by replay.", nil, &st.GapsRepaired)
	counter("rolter_kv_event_replays_total", "KV-event replay requests sent.", nil, &st.Replays)
	counter("rolter_kv_event_replay_failures_total", "KV-event replay requests that failed.", nil, &st.ReplayFailures)
	counter("rolter_kv_event_restarts_total", "KV-event sequence restarts (engine restarts).", nil, &st.Restarts)
	counter("rolter_kv_event_receive_errors_total", "Transient KV-event receive errors.", nil, &st.RecvErrors)
	counter("rolter_engine_scrape_failures_total", "Failed polls, by source.", prometheus.Labels{"source": "metrics"}, &s.tel.metricsFailures)
	counter("rolter_engine_scrape_failures_total", "Failed polls, by source.", prometheus.Labels{"source": "lmcache"}, &s.tel.lmcacheFailures)
	counter("rolter_engine_scrape_failures_total", "Failed polls, by source.", prometheus.Labels{"source": "models"}, &s.tel.modelsFailures)
	for _, state := range []mesh.ResidencyState{mesh.StateUnknown, mesh.StateExact, mesh.StateDegraded} {
		gauge("rolter_kv_residency_state", "1 for the residency view's current state.", prometheus.Labels{"state": state.String()},
			func() float64 {
				if s.tracker.State() == state {
					return 1
				}
				return 0
			})
	}
	gauge("rolter_kv_resident_blocks", "Distinct block keys resident on the engine.", nil,
		func() float64 { return float64(s.tracker.Stats().ResidentKeys) })
	gauge("rolter_kv_keyless_blocks_total", "Stored blocks that could not be keyed (no token ids, unknown parent, opaque extra keys).", nil,
		func() float64 { return float64(s.tracker.Stats().KeylessBlocks) })
	age := func(t time.Time) float64 {
		if t.IsZero() {
			return math.Inf(1)
		}
		return s.now().Sub(t).Seconds()
	}
	const ageHelp = "Seconds since the source last delivered telemetry (+Inf: never)."
	gauge("rolter_cache_telemetry_age_seconds", ageHelp, prometheus.Labels{"provider": s.cfg.NodeID, "source": "kv_events"},
		func() float64 {
			ns := st.LastMessageUnix.Load()
			if ns == 0 {
				return math.Inf(1)
			}
			return age(time.Unix(0, ns))
		})
	gauge("rolter_cache_telemetry_age_seconds", ageHelp, prometheus.Labels{"provider": s.cfg.NodeID, "source": "metrics"},
		func() float64 {
			if m := s.tel.metrics.Load(); m != nil {
				return age(m.at)
			}
			return math.Inf(1)
		})
	if s.cfg.LMCache != "" {
		gauge("rolter_cache_telemetry_age_seconds", ageHelp, prometheus.Labels{"provider": s.cfg.NodeID, "source": "lmcache"},
			func() float64 {
				if l := s.tel.lmcache.Load(); l != nil {
					return age(l.at)
				}
				return math.Inf(1)
			})
	}

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", s.healthz)
	return mux
}

// healthz answers 200 while Run is running (503 otherwise) with a small
// JSON summary. Engine trouble is reported, not failed on: the sidecar is
// healthy when it reports an unhealthy engine faithfully.
func (s *Sidecar) healthz(w http.ResponseWriter, _ *http.Request) {
	st := s.Status()
	body := struct {
		Status         string `json:"status"`
		NodeID         string `json:"node_id"`
		Residency      string `json:"residency"`
		ResidentBlocks int    `json:"resident_blocks"`
		MetricsOK      bool   `json:"metrics_ok"`
		LMCacheOK      bool   `json:"lmcache_ok"`
	}{"ok", s.cfg.NodeID, st.State.String(), st.ResidentBlocks, st.MetricsOK, st.LMCacheOK}
	code := http.StatusOK
	if !s.running.Load() {
		body.Status, code = "stopped", http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}
