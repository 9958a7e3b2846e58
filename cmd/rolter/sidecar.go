package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/rolter/rolter/internal/cli"
	"github.com/rolter/rolter/sidecar"
)

// runSidecar is `rolter sidecar`: it runs beside one engine, follows its KV
// events, /metrics and LMCache signal, and gossips the summaries to every
// router of the pool until SIGINT/SIGTERM (ctx), then leaves the pool.
// The process is the sidecar package's (sidecar.Open); this is its
// command line.
func runSidecar(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sidecar", stderr)
	var pc sidecar.ProcessConfig
	cfg := sidecar.RegisterFlags(fs)
	pc.Gossip.RegisterFlags(fs, "127.0.0.1:7946", "HOST:PORT of this sidecar's gossip (memberlist, UDP and TCP)")
	fs.StringVar(&pc.Join, "join", "", "comma-separated gossip seeds HOST:PORT (routers' or other sidecars' --gossip)")
	fs.BoolVar(&pc.InsecureDev, "insecure-dev", false, "allow unencrypted gossip without a key on non-loopback addresses "+
		"(development and tests only; on loopback only it is allowed with a warning)")
	fs.StringVar(&pc.EngineAdvertise, "engine-advertise", "",
		"engine URL routers reach and name in their routes (default --engine; set it when --engine is loopback)")
	fs.StringVar(&pc.Models, "models", "", "comma-separated models the engine serves, announced for discovery "+
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
	pc.Sidecar, pc.MetricsTLS, pc.Build = *cfg, tlsSrc.Admin, version
	pc.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	p, err := sidecar.Open(ctx, pc)
	if fe := (*sidecar.FlagError)(nil); errors.As(err, &fe) {
		return cli.Usage(fe.Err)
	}
	if err != nil {
		return err
	}
	go reloadCertsOnHUP(ctx, pc.Logger, tlsSrc.Admin)
	fmt.Fprintln(stdout, p.Banner())
	return p.Run(ctx)
}
