package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/rolter/rolter/sim/kvevents"
)

// Serve runs one simulated engine until ctx ends or a crash is injected:
// the KV event sockets (when configured), the step loop and the HTTP
// server on cfg.HTTPAddr. ready, when not nil, receives the bound HTTP
// address once the server accepts connections.
func Serve(ctx context.Context, cfg Config, log *slog.Logger, ready func(addr string)) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var pub *kvevents.Publisher
	if cfg.KVEvents != "" || cfg.KVEventsReplay != "" {
		pub = kvevents.NewPublisher(kvevents.Options{
			Encoding: cfg.KVEncoding, Topic: cfg.KVTopic, DPRank: cfg.DPRank, FirstSeq: cfg.KVFirstSeq,
		}, nil)
		if cfg.KVEvents != "" {
			socks, err := kvevents.Listen(ctx, pub, cfg.KVEvents, cfg.KVEventsReplay, cfg.KVDial, log)
			if err != nil {
				return fmt.Errorf("sim: kv events: %w", err)
			}
			defer socks.Close()
			pubEP, replayEP := socks.Endpoints()
			log.Info("kv events publishing", "endpoint", pubEP, "replay", replayEP,
				"bind", cfg.KVDial.ShouldBind(cfg.KVEvents), "topic", cfg.KVTopic)
		}
	}
	s := New(cfg, log, nil, pub)
	if cfg.GenerationLog != "" {
		f, err := os.OpenFile(cfg.GenerationLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("sim: generation log: %w", err)
		}
		defer f.Close()
		s.LogGenerations(f)
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("sim: listen %s: %w", cfg.HTTPAddr, err)
	}
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		s.Run(ctx)
	}()
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	log.Info("sim engine serving", "http", ln.Addr().String(), "model", cfg.Model, "speed", cfg.Speed,
		"kv_blocks", s.drv.eng.Config().KVBlocks, "instant", cfg.Engine.Instant)
	if ready != nil {
		ready(ln.Addr().String())
	}
	var result error
	select {
	case <-ctx.Done():
		shutdown, stop := context.WithTimeout(context.Background(), 2*time.Second)
		_ = hs.Shutdown(shutdown)
		stop()
	case <-s.Crashed():
		log.Warn("sim engine crashing (injected fault)")
		_ = hs.Close()
		result = ErrCrashed
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			result = fmt.Errorf("sim: serve: %w", err)
		}
	}
	cancel()
	<-loopDone
	st := s.Stats()
	log.Info("sim engine stopped", "completed", st.CompletedTotal, "prefix_queries", st.PrefixQueries,
		"prefix_hits", st.PrefixHits, "prefix_hit_rate", st.PrefixHitRate, "preemptions", st.Preemptions)
	return result
}
