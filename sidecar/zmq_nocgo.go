//go:build !cgo

package sidecar

import "log/slog"

// openZMQ without cgo: there is no ZMQ in this build. Everything else in the
// sidecar (decoder, tracker, scraper, fake sources) works without cgo.
func openZMQ(Config, *slog.Logger) (Source, Replayer, func(), error) {
	return nil, nil, nil, ErrNoCGO
}
