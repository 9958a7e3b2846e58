package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/rolter/rolter/certs"
	"github.com/rolter/rolter/routerd"
)

// tlsFlags are the TLS flags of the commands that listen: the same names
// on `rolter router` (API and admin ports) and `rolter sidecar` (its
// metrics port takes the admin ones).
type tlsFlags struct {
	api, admin certs.Files
}

// register adds --admin-tls-cert, --admin-tls-key and --admin-client-ca,
// and with api the --api-tls-cert and --api-tls-key flags too.
func (f *tlsFlags) register(fs *flag.FlagSet, api bool, adminWhat string) {
	if api {
		fs.StringVar(&f.api.Cert, "api-tls-cert", "", "PEM certificate (chain) of the OpenAI API listener: serve it over TLS (reloaded on SIGHUP)")
		fs.StringVar(&f.api.Key, "api-tls-key", "", "PEM key of --api-tls-cert")
	}
	fs.StringVar(&f.admin.Cert, "admin-tls-cert", "", "PEM certificate (chain) of the "+adminWhat+" listener: serve it over TLS (reloaded on SIGHUP)")
	fs.StringVar(&f.admin.Key, "admin-tls-key", "", "PEM key of --admin-tls-cert")
	fs.StringVar(&f.admin.ClientCA, "admin-client-ca", "", "PEM CA the "+adminWhat+" listener requires client certificates from "+
		"(mutual TLS; needs --admin-tls-cert)")
}

// load reads the files the flags name.
func (f *tlsFlags) load() (routerd.TLS, error) {
	out := routerd.TLS{AdminClientCA: f.admin.ClientCA}
	for _, l := range []struct {
		name  string
		files certs.Files
		dst   **certs.Source
	}{{"--api-tls", f.api, &out.API}, {"--admin-tls", f.admin, &out.Admin}} {
		if !l.files.Enabled() {
			continue
		}
		if l.files.Cert == "" || l.files.Key == "" {
			return out, fmt.Errorf("%w: %s-cert and %s-key go together (and --admin-client-ca needs them)", errUsage, l.name, l.name)
		}
		src, err := certs.Load(l.files)
		if err != nil {
			return out, fmt.Errorf("%w: %s: %v", errUsage, l.name, err)
		}
		*l.dst = src
	}
	return out, nil
}

// reloadCertsOnHUP reloads the sources on SIGHUP and when their files
// change (certs.Watch) until ctx ends. Without a source SIGHUP keeps its
// default.
func reloadCertsOnHUP(ctx context.Context, log *slog.Logger, srcs ...*certs.Source) {
	if !slices.ContainsFunc(srcs, func(s *certs.Source) bool { return s != nil }) {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	certs.Watch(ctx, log, hup, certs.CheckInterval, srcs...)
}
