package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/rolter/rolter/certs"
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
	pc.RegisterFlags(fs)
	// TLS of the metrics listener: the admin flags' names.
	var tf certs.ListenerFlags
	tf.RegisterFlags(fs, false, "metrics")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if _, pc.MetricsTLS, err = tf.Load(); err != nil {
		return cli.Usage(err)
	}
	pc.Build = version
	pc.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	p, err := sidecar.Open(ctx, pc)
	if err != nil {
		return err
	}
	go certs.WatchSIGHUP(ctx, pc.Logger, pc.MetricsTLS, p.GossipCerts())
	fmt.Fprintln(stdout, p.Banner())
	return p.Run(ctx)
}
