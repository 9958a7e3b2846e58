package kvevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/rolter/rolter/internal/zmqsock"
)

// Sockets are the live PUB socket and the optional replay ROUTER socket of
// one publisher.
type Sockets struct {
	zctx   *zmqsock.Context
	pub    *zmqsock.Socket
	router *zmqsock.Socket
	p      *Publisher
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Listen opens the PUB socket on endpoint (bind or connect per dial) and
// attaches it to p, and, when replayEndpoint is set, binds a ROUTER socket
// there that answers replay requests until ctx ends or Close is called.
func Listen(ctx context.Context, p *Publisher, endpoint, replayEndpoint string, dial Dial, log *slog.Logger) (*Sockets, error) {
	zctx, err := zmqsock.NewContext()
	if errors.Is(err, zmqsock.ErrNoCgo) {
		return nil, ErrNoCgo
	}
	if err != nil {
		return nil, fmt.Errorf("kvevents: %w", err)
	}
	s := &Sockets{zctx: zctx}
	fail := func(err error) (*Sockets, error) {
		s.closeSockets()
		return nil, err
	}
	if s.pub, err = zctx.Socket(zmqsock.Pub, zmqsock.Options{SendHWM: 100000}); err != nil {
		return fail(fmt.Errorf("kvevents: pub socket: %w", err))
	}
	if dial.ShouldBind(endpoint) {
		err = s.pub.Bind(endpoint)
	} else {
		err = s.pub.Connect(endpoint)
	}
	if err != nil {
		return fail(fmt.Errorf("kvevents: pub %s: %w", endpoint, err))
	}
	if replayEndpoint != "" {
		if s.router, err = zctx.Socket(zmqsock.Router, zmqsock.Options{RecvTimeout: 50 * time.Millisecond}); err != nil {
			return fail(fmt.Errorf("kvevents: router socket: %w", err))
		}
		if err = s.router.Bind(replayEndpoint); err != nil {
			return fail(fmt.Errorf("kvevents: replay %s: %w", replayEndpoint, err))
		}
	}
	s.p = p
	p.SetSender(pubSender{s.pub})
	rctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	if s.router != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveReplay(rctx, p, log)
		}()
	}
	return s, nil
}

type pubSender struct{ s *zmqsock.Socket }

func (ps pubSender) Send(frames [][]byte) error { return ps.s.SendDontWait(frames...) }

// serveReplay owns the ROUTER socket: only this goroutine touches it.
func (s *Sockets) serveReplay(ctx context.Context, p *Publisher, log *slog.Logger) {
	for ctx.Err() == nil {
		req, err := s.router.Recv()
		if errors.Is(err, zmqsock.ErrTimeout) {
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("kv replay receive failed", "err", err)
			}
			continue
		}
		resp, err := p.ReplayResponse(req)
		if err != nil {
			log.Warn("kv replay request rejected", "err", err)
			continue
		}
		for _, frames := range resp {
			if err := s.router.Send(frames...); err != nil {
				log.Warn("kv replay send failed", "err", err)
				break
			}
		}
	}
}

// Close detaches the publisher (it keeps buffering for replay), stops the
// replay loop and closes both sockets.
func (s *Sockets) Close() error {
	if s.p != nil {
		s.p.SetSender(nil)
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	return s.closeSockets()
}

func (s *Sockets) closeSockets() error {
	var errs []error
	if s.pub != nil {
		errs = append(errs, s.pub.Close())
	}
	if s.router != nil {
		errs = append(errs, s.router.Close())
	}
	if s.zctx != nil {
		errs = append(errs, s.zctx.Term())
	}
	return errors.Join(errs...)
}

// Endpoints returns the endpoints the sockets actually use (a "*" port
// resolved), for logs and tests.
func (s *Sockets) Endpoints() (pub, replay string) {
	pub, _ = s.pub.LastEndpoint()
	if s.router != nil {
		replay, _ = s.router.LastEndpoint()
	}
	return pub, replay
}
