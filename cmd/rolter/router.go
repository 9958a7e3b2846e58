package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/router"
)

// runRouter is `rolter router`: the data plane on --http and its metrics
// and probes on --admin, until SIGINT/SIGTERM, then a drain.
func runRouter(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("router", stderr)
	cfgPath := fs.String("config", "rolter.toml", "path of rolter.toml")
	httpAddr := fs.String("http", "127.0.0.1:4000", "address of the OpenAI-compatible API")
	adminAddr := fs.String("admin", "127.0.0.1:4001", "address of /metrics, /healthz and /readyz")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	srv := router.New(router.Options{Logger: log})
	if err := srv.Apply(cfg); err != nil {
		return err
	}
	api, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	admin, err := net.Listen("tcp", *adminAddr)
	if err != nil {
		api.Close()
		return fmt.Errorf("--admin: %w", err)
	}
	fmt.Fprintf(stdout, "rolter router: API on http://%s/v1, admin on http://%s (metrics, healthz, readyz)\n",
		api.Addr(), admin.Addr())
	go reloadOnHUP(ctx, srv, *cfgPath, log)
	return srv.Serve(ctx, api, admin)
}

// reloadOnHUP re-reads the config file on SIGHUP and applies it without a
// restart; a config that fails to load or build leaves the running one.
func reloadOnHUP(ctx context.Context, srv *router.Server, path string, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			cfg, err := config.Load(path)
			if err == nil {
				err = srv.Apply(cfg)
			}
			if err != nil {
				log.Error("config reload failed; keeping the running config", "path", path, "err", err)
			}
		}
	}
}
