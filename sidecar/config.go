package sidecar

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/rolter/rolter/kvblock"
	"github.com/rolter/rolter/scrape"
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("invalid sidecar config")

// DefaultLMCacheCapacity is LMCache's default max_local_cpu_size (5 GB),
// the denominator of the lmcache:local_cache_usage gauge form.
const DefaultLMCacheCapacity = scrape.DefaultLMCacheCapacity

// Config is everything a sidecar needs to know about its engine. Zero
// durations and sizes take the defaults documented on RegisterFlags.
type Config struct {
	// Engine is the engine's base URL; its /metrics and /v1/models are
	// polled. Empty: no polling (benchmarks driving a Source directly).
	Engine string
	// KVEvents is the engine's KV-event endpoint (ZMQ); empty: none, the
	// residency stays UNKNOWN.
	KVEvents string
	// KVEventsBind makes the subscriber bind KVEvents instead of connecting
	// (for engines whose publisher connects).
	KVEventsBind bool
	// KVEventsReplay is the engine's replay (ROUTER) endpoint; empty: gaps
	// cannot be repaired.
	KVEventsReplay string
	// Topic is the ZMQ topic prefix to subscribe to ("" = all).
	Topic string
	// LMCache is the URL of the LMCache signal: JSON {occupancy,
	// cache_available} or Prometheus text with lmcache:local_cache_usage.
	LMCache string
	// LMCacheCapacity is the LMCache CPU tier size in bytes for the gauge
	// form (default 5 GiB).
	LMCacheCapacity int64
	// NodeID names this sidecar (default $ROLTER_NODE_ID, then hostname).
	NodeID string
	// MetricsAddr serves the sidecar's own /metrics and /healthz; "" = off.
	MetricsAddr string
	// BlockSize is the engine's KV block size, used when an event omits it.
	BlockSize int

	ScrapeInterval    time.Duration // engine /metrics period (200ms)
	LMCacheInterval   time.Duration // LMCache poll period (1s)
	ModelsInterval    time.Duration // engine /v1/models poll period (5s)
	ScrapeTimeout     time.Duration // per request (1s)
	StaleAfter        time.Duration // a source older than this is not OK (5s)
	FlushInterval     time.Duration // residency delta batching period (50ms)
	FullStateInterval time.Duration // full snapshot period for SnapshotPublishers (30s)
	ReplayTimeout     time.Duration // one replay request (2s)
	MaxDeltaKeys      int           // keys per Delta (4096)
}

// RegisterFlags registers the flags of c's fields, with their defaults,
// on fs. ProcessConfig.RegisterFlags adds the gossip and discovery flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Engine, "engine", "http://127.0.0.1:8000", "engine base URL (its /metrics is scraped)")
	fs.StringVar(&c.KVEvents, "kv-events", "", "engine KV-event ZMQ endpoint, e.g. tcp://127.0.0.1:5557 (empty: no residency)")
	fs.BoolVar(&c.KVEventsBind, "kv-events-bind", false, "bind --kv-events instead of connecting (engine publisher connects)")
	fs.StringVar(&c.KVEventsReplay, "kv-events-replay", "", "engine KV-event replay endpoint, e.g. tcp://127.0.0.1:5558")
	fs.StringVar(&c.Topic, "topic", "", "KV-event topic prefix to subscribe to (empty: all)")
	fs.StringVar(&c.LMCache, "lmcache", "", "LMCache signal URL: JSON {occupancy,cache_available} or metrics with lmcache:local_cache_usage")
	fs.Int64Var(&c.LMCacheCapacity, "lmcache-capacity-bytes", DefaultLMCacheCapacity, "LMCache CPU tier size for the lmcache:local_cache_usage gauge form")
	fs.StringVar(&c.NodeID, "node-id", "", "node id, unique in the gossip pool (default $ROLTER_NODE_ID, "+
		"else <hostname>-sidecar-<--gossip port>)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "127.0.0.1:9101", "address of the sidecar's own /metrics and /healthz (empty: off)")
	fs.IntVar(&c.BlockSize, "block-size", kvblock.DefaultBlockSize, "engine KV block size in tokens, when events omit it")
	fs.DurationVar(&c.ScrapeInterval, "scrape-interval", 200*time.Millisecond, "engine /metrics scrape period")
	fs.DurationVar(&c.LMCacheInterval, "lmcache-interval", time.Second, "LMCache poll period")
}

// Validate fills defaults and checks the config.
func (c *Config) Validate() error {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ScrapeInterval, 200*time.Millisecond)
	def(&c.LMCacheInterval, time.Second)
	def(&c.ModelsInterval, 5*time.Second)
	def(&c.ScrapeTimeout, time.Second)
	def(&c.StaleAfter, 5*time.Second)
	def(&c.FlushInterval, 50*time.Millisecond)
	def(&c.FullStateInterval, 30*time.Second)
	def(&c.ReplayTimeout, 2*time.Second)
	if c.MaxDeltaKeys <= 0 {
		c.MaxDeltaKeys = 4096
	}
	if c.BlockSize <= 0 {
		c.BlockSize = kvblock.DefaultBlockSize
	}
	if c.LMCacheCapacity <= 0 {
		c.LMCacheCapacity = DefaultLMCacheCapacity
	}
	if c.NodeID == "" {
		c.NodeID = os.Getenv("ROLTER_NODE_ID")
	}
	if c.NodeID == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("%w: no --node-id and no hostname: %v", ErrConfig, err)
		}
		c.NodeID = h
	}
	if err := checkHTTPURL("engine", c.Engine); err != nil {
		return err
	}
	if err := checkHTTPURL("lmcache", c.LMCache); err != nil {
		return err
	}
	for name, ep := range map[string]string{"kv-events": c.KVEvents, "kv-events-replay": c.KVEventsReplay} {
		if ep != "" && !strings.Contains(ep, "://") {
			return fmt.Errorf("%w: --%s %q is not a ZMQ endpoint (tcp://host:port, ipc://path)", ErrConfig, name, ep)
		}
	}
	if c.KVEventsReplay != "" && c.KVEvents == "" {
		return fmt.Errorf("%w: --kv-events-replay without --kv-events", ErrConfig)
	}
	return nil
}

// checkHTTPURL accepts an empty value (the source is off) or an http(s) URL.
func checkHTTPURL(name, raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: --%s %q is not an http(s) URL", ErrConfig, name, raw)
	}
	return nil
}
