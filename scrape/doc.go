// Package scrape owns reading an engine's state over plain HTTP: the
// parsers of an engine's Prometheus /metrics (vLLM, SGLang, TGI names) and
// of the LMCache occupancy signal (the polled JSON contract or the
// lmcache:local_cache_usage gauge), which the sidecar uses, and the
// router's own background Poller, which follows the providers of a
// rolter.toml with [metrics_scrape] and [providers.lmcache] for routers
// that run without sidecars (--standalone included). Nothing here runs on
// a request's path: polls run in background goroutines and publish into
// atomics that the router's hot path reads without locks or allocations.
package scrape
