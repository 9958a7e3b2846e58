package certs

import (
	"context"
	"log/slog"
	"time"
)

// CheckInterval is how often the commands check the files for a renewal
// written without a signal (a Kubernetes Secret volume update).
const CheckInterval = 30 * time.Second

// Watch reloads every source (nil ones skipped) when reload receives (the
// commands send on SIGHUP), and any whose files changed every interval,
// until ctx ends. A source whose files fail to load keeps serving what it
// had; each outcome is logged.
func Watch[T any](ctx context.Context, log *slog.Logger, reload <-chan T, interval time.Duration, srcs ...*Source) {
	var live []*Source
	for _, s := range srcs {
		if s != nil {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return
	}
	check := time.NewTicker(interval)
	defer check.Stop()
	for {
		signalled := false
		select {
		case <-ctx.Done():
			return
		case <-reload:
			signalled = true
		case <-check.C:
		}
		for _, s := range live {
			if !signalled && !s.Changed() {
				continue
			}
			if err := s.Reload(); err != nil {
				log.Error("certificate reload failed; keeping the running certificate", "err", err)
				continue
			}
			log.Info("certificate reloaded", "subject", s.Leaf().Subject.String(),
				"serial", s.Leaf().SerialNumber.String(), "not_after", s.Leaf().NotAfter.Format(time.RFC3339))
		}
	}
}
