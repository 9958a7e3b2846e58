package certs

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
)

// ListenerFlags are the TLS flags of the commands that listen: the same
// names on `rolter router` (API and admin ports) and `rolter sidecar`
// (its metrics port takes the admin ones).
type ListenerFlags struct{ API, Admin Files }

// RegisterFlags adds --admin-tls-cert, --admin-tls-key and
// --admin-client-ca (adminWhat names the listener in their help), and
// with api the --api-tls-cert and --api-tls-key flags too.
func (f *ListenerFlags) RegisterFlags(fs *flag.FlagSet, api bool, adminWhat string) {
	if api {
		fs.StringVar(&f.API.Cert, "api-tls-cert", "", "PEM certificate (chain) of the OpenAI API listener: serve it over TLS (reloaded on SIGHUP)")
		fs.StringVar(&f.API.Key, "api-tls-key", "", "PEM key of --api-tls-cert")
	}
	fs.StringVar(&f.Admin.Cert, "admin-tls-cert", "", "PEM certificate (chain) of the "+adminWhat+" listener: serve it over TLS (reloaded on SIGHUP)")
	fs.StringVar(&f.Admin.Key, "admin-tls-key", "", "PEM key of --admin-tls-cert")
	fs.StringVar(&f.Admin.ClientCA, "admin-client-ca", "", "PEM CA the "+adminWhat+" listener requires client certificates from "+
		"(mutual TLS; needs --admin-tls-cert)")
}

// Load reads the files the flags name; a listener without them gets a
// nil Source (plaintext). Every error is the command line's and names
// the flags.
func (f *ListenerFlags) Load() (api, admin *Source, err error) {
	for _, l := range []struct {
		name  string
		files Files
		dst   **Source
	}{{"--api-tls", f.API, &api}, {"--admin-tls", f.Admin, &admin}} {
		if !l.files.Enabled() {
			continue
		}
		if l.files.Cert == "" || l.files.Key == "" {
			return api, admin, fmt.Errorf("%s-cert and %s-key go together (and --admin-client-ca needs them)", l.name, l.name)
		}
		src, err := Load(l.files)
		if err != nil {
			return api, admin, fmt.Errorf("%s: %v", l.name, err)
		}
		*l.dst = src
	}
	return api, admin, nil
}

// WatchSIGHUP reloads the sources on SIGHUP and when their files change
// (Watch, every CheckInterval) until ctx ends. Without a source SIGHUP
// keeps its default.
func WatchSIGHUP(ctx context.Context, log *slog.Logger, srcs ...*Source) {
	if !slices.ContainsFunc(srcs, func(s *Source) bool { return s != nil }) {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	Watch(ctx, log, hup, CheckInterval, srcs...)
}
