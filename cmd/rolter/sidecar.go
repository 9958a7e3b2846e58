package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/sidecar"
)

// runSidecar is `rolter sidecar`: it runs beside one engine, follows its KV
// events, /metrics and LMCache signal, and gossips the summaries to every
// router of the pool until SIGINT/SIGTERM (ctx), then leaves the pool.
func runSidecar(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sidecar", stderr)
	cfg := sidecar.RegisterFlags(fs)
	var gf gossipFlags
	gf.register(fs, "127.0.0.1:7946", "HOST:PORT of this sidecar's gossip (memberlist, UDP and TCP)")
	join := fs.String("join", "", "comma-separated gossip seeds HOST:PORT (routers' or other sidecars' --gossip)")
	insecure := fs.Bool("insecure-dev", false, "allow unencrypted gossip without a key on non-loopback addresses "+
		"(development and tests only; on loopback only it is allowed with a warning)")
	advertise := fs.String("engine-advertise", "",
		"engine URL routers reach and name in their routes (default --engine; set it when --engine is loopback)")
	models := fs.String("models", "", "comma-separated models the engine serves, announced for discovery "+
		"(default: read from the engine's /v1/models, waiting for it to answer)")
	// TLS of the metrics listener (tlsflags.go): the admin flags' names.
	var tf tlsFlags
	tf.register(fs, false, "metrics")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	tlsSrc, err := tf.load()
	if err != nil {
		return err
	}
	if cfg.NodeID == "" {
		cfg.NodeID = strings.TrimSpace(os.Getenv("ROLTER_NODE_ID"))
	}
	if cfg.NodeID == "" {
		id, err := defaultNodeID("sidecar", gf.addr)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		cfg.NodeID = id
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	seeds, err := parseSeeds(*join)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	engineURL := cfg.Engine
	if *advertise != "" {
		engineURL = *advertise
	}
	if engineURL == "" {
		return fmt.Errorf("%w: --engine or --engine-advertise is required", errUsage)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	meta := mesh.Meta{Role: mesh.RoleSidecar, NodeID: cfg.NodeID, EngineURL: engineURL, Build: version}
	plaintext := *insecure
	why := gf.needsKey(seeds)
	if key, _ := mesh.LoadKey(gf.keyFile, os.Getenv); len(key) == 0 && !plaintext && why == "" {
		log.Warn("unencrypted gossip: this sidecar binds and joins loopback addresses only; a gossip key " +
			"(or --insecure-dev) is required once it binds, advertises or joins another address")
		plaintext = true
	}
	mcfg, err := gf.meshConfig(cfg.NodeID, meta, plaintext, os.Getenv, log)
	if errors.Is(err, mesh.ErrNoGossipKey) {
		return fmt.Errorf("%w: %w (required because %s)", errUsage, err, why)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if mcfg.Meta.Models = splitList(*models); len(mcfg.Meta.Models) == 0 && cfg.Engine != "" {
		log.Info("waiting for the engine's /v1/models to announce its models", "engine", cfg.Engine)
		if mcfg.Meta.Models, err = waitModels(ctx, cfg.Engine, time.Second); err != nil {
			return err
		}
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	node, err := startMesh(ctx, mcfg, seeds, log, stop)
	if err != nil {
		return err
	}
	// The publisher starts EXACT and empty; until the event stream says
	// otherwise the residency is not known.
	node.Publisher().Apply(mesh.ResidencyDelta{State: mesh.StateDegraded})
	defer func() {
		if err := node.Leave(2 * time.Second); err != nil {
			log.Warn("leaving the gossip pool", "err", err)
		}
	}()
	go reloadCertsOnHUP(ctx, log, tlsSrc.admin)
	sc, err := sidecar.New(*cfg, &meshPublisher{pub: node.Publisher()},
		sidecar.Options{Logger: log, Collectors: []prometheus.Collector{node.Collector()}, TLS: tlsConfig(tlsSrc.admin)})
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	fmt.Fprintf(stdout, "rolter sidecar %s: engine %s (models %s), gossip on %s, metrics on %s://%s\n",
		cfg.NodeID, engineURL, strings.Join(mcfg.Meta.Models, ","), node.Addr(), scheme(tlsSrc.admin), cfg.MetricsAddr)
	err = sc.Run(ctx)
	if cause := context.Cause(ctx); errors.Is(cause, mesh.ErrNameConflict) {
		return cause
	}
	return err
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// errNoModels: the engine's /v1/models listed no base model.
var errNoModels = errors.New("engine lists no models")

// waitModels polls engine/v1/models every interval until it lists a base
// model or ctx ends.
func waitModels(ctx context.Context, engine string, interval time.Duration) ([]string, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	url := strings.TrimRight(engine, "/") + "/v1/models"
	for {
		models, err := fetchModels(ctx, client, url)
		if err == nil {
			return models, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("engine %s: %w (last error: %v)", url, ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

func fetchModels(ctx context.Context, client *http.Client, url string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	m, err := sidecar.ParseModels(body)
	if err != nil {
		return nil, err
	}
	if len(m.Models) == 0 {
		return nil, errNoModels
	}
	return m.Models, nil
}

// meshPublisher hands the sidecar's summaries to the gossip publisher.
// The sidecar's UNKNOWN residency (no event stream yet) is published as
// DEGRADED: the set is then empty or partial, and a router must never
// score it as exact.
type meshPublisher struct {
	pub *mesh.Publisher
	// streaming: a residency delta or snapshot was published; from then
	// on the deltas carry the state.
	streaming atomic.Bool
}

var (
	_ sidecar.Publisher         = (*meshPublisher)(nil)
	_ sidecar.SnapshotPublisher = (*meshPublisher)(nil)
)

func meshState(s sidecar.ViewState) mesh.ResidencyState {
	if s == sidecar.StateExact {
		return mesh.StateExact
	}
	return mesh.StateDegraded
}

// PublishResidency implements sidecar.Publisher.
func (p *meshPublisher) PublishResidency(d sidecar.Delta) {
	p.streaming.Store(true)
	p.pub.Apply(mesh.ResidencyDelta{Added: d.Added, Removed: d.Removed, Cleared: d.Cleared, State: meshState(d.State)})
}

// PublishSnapshot implements sidecar.SnapshotPublisher: the publisher's
// set becomes the snapshot (only the difference travels).
func (p *meshPublisher) PublishSnapshot(s sidecar.Snapshot) {
	p.streaming.Store(true)
	p.pub.Reset(s.Keys, meshState(s.State))
}

// PublishStatus implements sidecar.Publisher.
func (p *meshPublisher) PublishStatus(s sidecar.EngineStatus) {
	st := mesh.EngineStatus{
		MetricsOK: s.MetricsOK, PrefixHits: s.PrefixHits, PrefixQueries: s.PrefixQueries,
		BlockSize: s.BlockSize, MaxLoras: s.MaxLoRAs, Adapters: s.Adapters,
		LMCacheKnown: s.LMCacheOK,
	}
	if s.MetricsOK {
		st.Running, st.Waiting, st.KVUsage = s.Running, s.Waiting, s.KVUsage
	}
	if s.LMCacheOK {
		st.LMCacheOccupancy, st.LMCacheAvailable = s.LMCacheOccupancy, s.LMCacheAvailable
	}
	p.pub.SetStatus(st)
	// No event stream yet: no delta will say so, the status does.
	if s.State == sidecar.StateUnknown && !p.streaming.Load() {
		p.pub.Apply(mesh.ResidencyDelta{State: mesh.StateDegraded})
	}
}
