package sidecar

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rolter/rolter/certs"
	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/internal/cli"
)

// ProcessConfig is what `rolter sidecar` is started with: the Sidecar's
// Config and the settings of its gossip member, typed from the flags.
// Messages about unusable settings name the flags.
type ProcessConfig struct {
	Sidecar Config
	Gossip  mesh.Addrs
	// Join is --join: gossip seeds HOST:PORT, comma-separated.
	Join string
	// InsecureDev allows unencrypted gossip off loopback.
	InsecureDev bool
	// EngineAdvertise is the engine URL routers reach and name in their
	// routes ("": Sidecar.Engine).
	EngineAdvertise string
	// Models are the models the engine serves, comma-separated; "": read
	// from the engine's /v1/models, waiting for it to answer.
	Models string
	// MetricsTLS serves the metrics listener over TLS (nil: plaintext).
	MetricsTLS *certs.Source
	// Build is this binary's version, announced to the pool.
	Build  string
	Getenv func(string) string // nil: os.Getenv
	Logger *slog.Logger        // nil: discard
}

// Process is one running `rolter sidecar`: the Sidecar, publishing into
// this process's member of the gossip pool.
type Process struct {
	sc      *Sidecar
	node    *mesh.Sidecar
	log     *slog.Logger
	stopped context.Context // cancelled with mesh.ErrNameConflict by a late join
	stop    context.CancelCauseFunc
	banner  string
	// gossipCerts reloads the gossip identity into node (nil without one).
	gossipCerts *certs.Source
	metricsLn   net.Listener // nil: --metrics-addr empty; Run's server closes it
}

// Open checks cfg, announces the engine (waiting for its /v1/models when
// cfg.Models is empty), joins the gossip pool and builds the Sidecar.
// Unusable settings are cli.ErrUsage errors. Run serves.
func Open(ctx context.Context, cfg ProcessConfig) (*Process, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sc := cfg.Sidecar
	if sc.NodeID == "" {
		sc.NodeID = strings.TrimSpace(getenv("ROLTER_NODE_ID"))
	}
	if sc.NodeID == "" {
		id, err := mesh.DefaultNodeID("sidecar", cfg.Gossip.Bind)
		if err != nil {
			return nil, cli.Usage(err)
		}
		sc.NodeID = id
	}
	if err := sc.Validate(); err != nil {
		return nil, cli.Usage(err)
	}
	seeds, err := mesh.ParseSeeds(cfg.Join)
	if err != nil {
		return nil, cli.Usage(err)
	}
	engineURL := sc.Engine
	if cfg.EngineAdvertise != "" {
		engineURL = cfg.EngineAdvertise
	}
	if engineURL == "" {
		return nil, cli.Usage(errors.New("--engine or --engine-advertise is required"))
	}
	meta := mesh.Meta{NodeID: sc.NodeID, EngineURL: engineURL, Build: cfg.Build}
	plaintext := cfg.InsecureDev
	why := cfg.Gossip.NeedsKey(seeds)
	if key, _ := mesh.LoadKey(cfg.Gossip.KeyFile, getenv); len(key) == 0 && !plaintext && why == "" {
		log.Warn("unencrypted gossip: this sidecar binds and joins loopback addresses only; a gossip key " +
			"(or --insecure-dev) is required once it binds, advertises or joins another address")
		plaintext = true
	}
	mcfg, err := cfg.Gossip.Config(sc.NodeID, meta, plaintext, getenv, log)
	if errors.Is(err, mesh.ErrNoGossipKey) {
		return nil, cli.Usage(fmt.Errorf("%w (required because %s)", err, why))
	}
	if err != nil {
		return nil, cli.Usage(err)
	}
	if mcfg.Meta.Models = splitList(cfg.Models); len(mcfg.Meta.Models) == 0 && sc.Engine != "" {
		log.Info("waiting for the engine's /v1/models to announce its models", "engine", sc.Engine)
		if mcfg.Meta.Models, err = waitModels(ctx, sc.Engine, time.Second); err != nil {
			return nil, err
		}
	}
	p := &Process{log: log}
	p.stopped, p.stop = context.WithCancelCause(ctx)
	if p.node, err = mesh.StartJoining(p.stopped, mesh.StartSidecar, mcfg, seeds, log, p.stop); err != nil {
		p.stop(nil)
		if errors.Is(err, mesh.ErrIdentity) {
			return nil, cli.Usage(err) // a --gossip-tls-cert for another role
		}
		return nil, err
	}
	if mcfg.Identity != nil {
		if p.gossipCerts, err = certs.Load(certs.Files{Cert: cfg.Gossip.CertFile, Key: cfg.Gossip.CertKeyFile, ClientCA: cfg.Gossip.CAFile}); err != nil {
			p.close()
			return nil, cli.Usage(err)
		}
		p.gossipCerts.OnReload(p.node.ApplyIdentity)
	}
	// The publisher starts EXACT and empty; until the event stream says
	// otherwise the residency is not known.
	p.node.Publisher().Apply(mesh.ResidencyDelta{State: mesh.StateDegraded})
	var tc *tls.Config
	if cfg.MetricsTLS != nil {
		tc = cfg.MetricsTLS.ServerConfig()
	}
	metrics := "metrics off"
	var ln net.Listener
	if sc.MetricsAddr != "" {
		if ln, err = net.Listen("tcp", sc.MetricsAddr); err != nil {
			p.close()
			return nil, fmt.Errorf("--metrics-addr: %w", err)
		}
		scheme := "http"
		if cfg.MetricsTLS != nil {
			scheme = "https"
		}
		metrics = "metrics on " + scheme + "://" + ln.Addr().String()
		p.metricsLn = ln
	}
	if p.sc, err = New(sc, &meshPublisher{pub: p.node.Publisher()},
		Options{Logger: log, Collectors: []prometheus.Collector{p.node.Collector()}, TLS: tc, Listener: ln}); err != nil {
		p.close()
		return nil, cli.Usage(err)
	}
	p.banner = fmt.Sprintf("rolter sidecar %s: engine %s (models %s), gossip on %s, %s",
		sc.NodeID, engineURL, strings.Join(mcfg.Meta.Models, ","), p.node.Addr(), metrics)
	return p, nil
}

// Banner is the line `rolter sidecar` prints once it runs.
func (p *Process) Banner() string { return p.banner }

// GossipCerts is the gossip identity's certificate, key and CA (nil
// without --gossip-tls-cert); reloading it renews the member's identity in
// the pool. The command reloads it with the metrics listener's.
func (p *Process) GossipCerts() *certs.Source { return p.gossipCerts }

// close leaves the pool and closes the metrics listener.
func (p *Process) close() {
	if p.metricsLn != nil {
		p.metricsLn.Close()
	}
	if err := p.node.Leave(2 * time.Second); err != nil {
		p.log.Warn("leaving the gossip pool", "err", err)
	}
	p.stop(nil)
}

// Run runs the Sidecar until ctx ends (or its node id turns out to be
// taken in the pool: then the error is mesh.ErrNameConflict), then leaves
// the pool.
func (p *Process) Run(ctx context.Context) error {
	defer p.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.stopped, cancel)()
	err := p.sc.Run(ctx)
	if cause := context.Cause(p.stopped); errors.Is(cause, mesh.ErrNameConflict) {
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
	m, err := ParseModels(body)
	if err != nil {
		return nil, err
	}
	if len(m.Models) == 0 {
		return nil, errNoModels
	}
	return m.Models, nil
}
