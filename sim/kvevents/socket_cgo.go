//go:build cgo

package kvevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// Sockets are the live PUB socket and the optional replay ROUTER socket of
// one publisher.
type Sockets struct {
	zctx   *zmq.Context
	pub    *zmq.Socket
	router *zmq.Socket
	p      *Publisher
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Listen opens the PUB socket on endpoint (bind or connect per dial) and
// attaches it to p, and, when replayEndpoint is set, binds a ROUTER socket
// there that answers replay requests until ctx ends or Close is called.
func Listen(ctx context.Context, p *Publisher, endpoint, replayEndpoint string, dial Dial, log *slog.Logger) (*Sockets, error) {
	zctx, err := zmq.NewContext()
	if err != nil {
		return nil, fmt.Errorf("kvevents: zmq context: %w", err)
	}
	s := &Sockets{zctx: zctx}
	fail := func(err error) (*Sockets, error) {
		s.closeSockets()
		return nil, err
	}
	if s.pub, err = zctx.NewSocket(zmq.PUB); err != nil {
		return fail(fmt.Errorf("kvevents: pub socket: %w", err))
	}
	_ = s.pub.SetLinger(0)
	_ = s.pub.SetSndhwm(100000)
	if dial.ShouldBind(endpoint) {
		err = s.pub.Bind(endpoint)
	} else {
		err = s.pub.Connect(endpoint)
	}
	if err != nil {
		return fail(fmt.Errorf("kvevents: pub %s: %w", endpoint, err))
	}
	if replayEndpoint != "" {
		if s.router, err = zctx.NewSocket(zmq.ROUTER); err != nil {
			return fail(fmt.Errorf("kvevents: router socket: %w", err))
		}
		_ = s.router.SetLinger(0)
		_ = s.router.SetRcvtimeo(50 * time.Millisecond)
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

type pubSender struct{ s *zmq.Socket }

func (ps pubSender) Send(frames [][]byte) error {
	_, err := ps.s.SendMessageDontwait(frames)
	return err
}

// serveReplay owns the ROUTER socket: only this goroutine touches it.
func (s *Sockets) serveReplay(ctx context.Context, p *Publisher, log *slog.Logger) {
	for ctx.Err() == nil {
		req, err := s.router.RecvMessageBytes(0)
		if err != nil {
			if errors.Is(err, zmq.ETIMEDOUT) || zmq.AsErrno(err) == zmq.Errno(11) {
				continue
			}
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
			if _, err := s.router.SendMessage(frames); err != nil {
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
	errs = append(errs, s.zctx.Term())
	return errors.Join(errs...)
}

// Endpoints returns the endpoints the sockets actually use (a "*" port
// resolved), for logs and tests.
func (s *Sockets) Endpoints() (pub, replay string) {
	pub, _ = s.pub.GetLastEndpoint()
	if s.router != nil {
		replay, _ = s.router.GetLastEndpoint()
	}
	return pub, replay
}
