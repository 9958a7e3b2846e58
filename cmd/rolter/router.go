package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/internal/cli"
	"github.com/rolter/rolter/routerd"
)

// runRouter is `rolter router`: the Raft replica of the control plane, the
// data plane on --http (rebuilt on every config_version) and, on --admin,
// the admin API, the dashboard, /metrics, /healthz and /readyz, until
// SIGINT/SIGTERM, then a drain. --standalone runs the data plane alone
// from --config. The process is routerd's; this is its command line.
func runRouter(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("router", stderr)
	var rc routerd.Config
	rc.RegisterFlags(fs)
	logFormat := fs.String("log-format", "text", "log format: text or json (the request log is one line per request)")
	// TLS of the API and admin listeners (tlsflags.go).
	var tf tlsFlags
	tf.register(fs, true, "admin")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	tlsSrc, err := tf.load()
	if err != nil {
		return err
	}
	if rc.File, err = config.Load(rc.ConfigPath); err != nil {
		return err
	}
	if rc.Logger, err = newLogger(*logFormat, stderr); err != nil {
		return err
	}
	rc.TLS, rc.Build = tlsSrc, version
	r, err := routerd.Open(ctx, rc)
	if fe := (*routerd.FlagError)(nil); errors.As(err, &fe) {
		return cli.Usage(fe.Err)
	}
	if err != nil {
		return err
	}
	defer r.Close()
	go reloadCertsOnHUP(ctx, rc.Logger, tlsSrc.API, tlsSrc.Admin, r.RaftCerts())
	hup, stopHUP := context.WithCancel(ctx)
	defer stopHUP()
	go routerd.ReloadOnHUP(hup, rc.ConfigPath, rc.Logger, r.Reload)
	fmt.Fprintln(stdout, r.Banner())
	return r.Run(ctx)
}
