//go:build !cgo

package kvevents

import (
	"context"
	"log/slog"
)

// Sockets is unavailable without cgo.
type Sockets struct{}

// Listen reports ErrNoCgo: KV event sockets need a cgo build.
func Listen(_ context.Context, _ *Publisher, _, _ string, _ Dial, _ *slog.Logger) (*Sockets, error) {
	return nil, ErrNoCgo
}

// Close does nothing.
func (s *Sockets) Close() error { return nil }

// Endpoints returns nothing without cgo.
func (s *Sockets) Endpoints() (pub, replay string) { return "", "" }
