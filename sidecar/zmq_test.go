//go:build cgo

package sidecar

import (
	"context"
	"encoding/binary"
	"net"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/internal/testwait"
	"github.com/rolter/rolter/internal/zmqsock"
)

// testPublisher is a tiny vLLM-style KV-event publisher: a PUB socket for
// the live stream and a ROUTER socket answering replay requests from a
// buffer. Only the test goroutine touches pub; the ROUTER has its own.
type testPublisher struct {
	t         *testing.T
	zctx      *zmqsock.Context
	pub       *zmqsock.Socket
	pubEP     string
	routerEP  string
	mu        sync.Mutex
	buf       []Message
	stop      chan struct{}
	routerEnd chan struct{}
}

// newTestPublisher binds (or, bindPub false, connects) its PUB socket to
// pubEndpoint and binds its ROUTER to routerEndpoint.
func newTestPublisher(t *testing.T, pubEndpoint string, bindPub bool, routerEndpoint string) *testPublisher {
	zctx, err := zmqsock.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	p := &testPublisher{t: t, zctx: zctx, stop: make(chan struct{}), routerEnd: make(chan struct{})}
	p.pub = p.socket(zmqsock.Pub, zmqsock.Options{})
	if bindPub {
		must(t, p.pub.Bind(pubEndpoint))
		p.pubEP, err = p.pub.LastEndpoint()
		must(t, err)
	} else {
		must(t, p.pub.Connect(pubEndpoint))
		p.pubEP = pubEndpoint
	}
	router := p.socket(zmqsock.Router, zmqsock.Options{RecvTimeout: 20 * time.Millisecond})
	must(t, router.Bind(routerEndpoint))
	p.routerEP, err = router.LastEndpoint()
	must(t, err)
	go p.serveReplay(router)
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (p *testPublisher) socket(kind zmqsock.Type, opt zmqsock.Options) *zmqsock.Socket {
	s, err := p.zctx.Socket(kind, opt)
	must(p.t, err)
	return s
}

// serveReplay answers [id, "", start] with [id, "", seq, payload]... and
// the end marker, as vLLM's replay ROUTER does.
func (p *testPublisher) serveReplay(router *zmqsock.Socket) {
	defer close(p.routerEnd)
	defer router.Close()
	for {
		select {
		case <-p.stop:
			return
		default:
		}
		frames, err := router.Recv()
		if err != nil || len(frames) != 3 || len(frames[2]) != 8 {
			continue
		}
		id, from := frames[0], binary.BigEndian.Uint64(frames[2])
		p.mu.Lock()
		msgs := slices.Clone(p.buf)
		p.mu.Unlock()
		seq := make([]byte, 8)
		for _, m := range msgs {
			if m.Seq >= from {
				binary.BigEndian.PutUint64(seq, m.Seq)
				_ = router.Send(id, nil, seq, m.Payload)
			}
		}
		binary.BigEndian.PutUint64(seq, EndOfReplay)
		_ = router.Send(id, nil, seq, nil)
	}
}

// send buffers m for replay and, unless lost, publishes it live.
func (p *testPublisher) send(m Message, lost bool) {
	p.mu.Lock()
	p.buf = append(p.buf, m)
	p.mu.Unlock()
	if lost {
		return
	}
	seq := make([]byte, 8)
	binary.BigEndian.PutUint64(seq, m.Seq)
	must(p.t, p.pub.Send([]byte(m.Topic), seq, m.Payload))
}

func (p *testPublisher) close() {
	close(p.stop)
	<-p.routerEnd
	p.pub.Close()
	_ = p.zctx.Term()
}

func freeTCPPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// runSidecar starts a sidecar on real ZMQ and returns its recorder and a
// stop function.
func runSidecar(t *testing.T, cfg Config) (*Sidecar, *recorder, func()) {
	srv := httptest.NewServer(&fakeEngineHTTP{body: []byte("vllm:num_requests_running 0\n")})
	cfg.Engine, cfg.NodeID, cfg.FlushInterval = srv.URL, "zmq-test", 5*time.Millisecond
	pub := newRecorder(t)
	sc, err := New(cfg, pub, Options{Logger: discardLog()})
	must(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- sc.Run(ctx) }()
	return sc, pub, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		srv.Close()
	}
}

// waitSubscribed publishes engine steps until the sidecar has received one
// (ZMQ drops messages sent before the subscription is up: the slow-joiner
// effect, which replay from 0 must repair).
func waitSubscribed(t *testing.T, p *testPublisher, e *fakeEngine, sc *Sidecar, before uint64) {
	t.Helper()
	testwait.For(t, 10*time.Second, "the sidecar to receive a message over ZMQ", func() bool {
		if sc.stats.Messages.Load() != before {
			return true
		}
		p.send(e.step(), false)
		return false
	})
}

func TestZMQLiveStreamWithReplayAndRestart(t *testing.T) {
	ep := "tcp://127.0.0.1:" + strconv.Itoa(freeTCPPort(t))
	replayEP := "tcp://127.0.0.1:" + strconv.Itoa(freeTCPPort(t))
	p := newTestPublisher(t, ep, true, replayEP)
	sc, pub, stop := runSidecar(t, Config{KVEvents: ep, KVEventsReplay: replayEP, Topic: "kv@"})
	defer stop()

	engine := newFakeEngine(t, 1, 0)
	waitSubscribed(t, p, engine, sc, 0)
	for i := 0; i < 300; i++ {
		p.send(engine.step(), i%40 == 39) // every 40th lost on the wire
	}
	p.send(engine.step(), false)
	want := engine.truth()
	testwait.For(t, 10*time.Second, "the view over ZMQ to equal the engine, EXACT", func() bool {
		got, state := pub.keys()
		return state == mesh.StateExact && slices.Equal(got, want)
	})
	if g, r := sc.stats.Gaps.Load(), sc.stats.GapsRepaired.Load(); g == 0 || g != r {
		t.Fatalf("gaps %d, repaired %d: every gap must be repaired by replay", g, r)
	}

	// The engine restarts on the same ports: new sockets, sequence from 0,
	// empty cache and replay buffer. ZMQ reconnects the subscriber; the
	// messages lost while it reconnects are fetched by replay from 0.
	p.close()
	p2 := newTestPublisher(t, ep, true, replayEP)
	defer p2.close()
	engine2 := newFakeEngine(t, 2, 0)
	waitSubscribed(t, p2, engine2, sc, sc.stats.Messages.Load())
	for i := 0; i < 50; i++ {
		p2.send(engine2.step(), false)
	}
	want2 := engine2.truth()
	testwait.For(t, 10*time.Second, "the view to follow the restarted engine, EXACT", func() bool {
		got, state := pub.keys()
		return state == mesh.StateExact && slices.Equal(got, want2)
	})
	if n := sc.stats.Restarts.Load(); n != 1 {
		t.Fatalf("restarts = %d, want 1", n)
	}
}

func TestZMQSubscriberBinds(t *testing.T) {
	ep := "tcp://127.0.0.1:" + strconv.Itoa(freeTCPPort(t))
	sc, pub, stop := runSidecar(t, Config{KVEvents: ep, KVEventsBind: true})
	defer stop()
	// The publisher dials the sidecar; no replay endpoint is configured.
	p := newTestPublisher(t, ep, false, "tcp://127.0.0.1:*")
	defer p.close()
	engine := newFakeEngine(t, 3, 1) // a publisher whose sequence starts at 1
	waitSubscribed(t, p, engine, sc, 0)
	// Without replay the view is EXACT only if seq 1 itself arrived; an
	// AllBlocksCleared in sequence resyncs it either way.
	p.send(engine.clearAll(), false)
	for i := 0; i < 100; i++ {
		p.send(engine.step(), false)
	}
	want := engine.truth()
	testwait.For(t, 10*time.Second, "the bound subscriber's view to equal the engine", func() bool {
		got, state := pub.keys()
		return state == mesh.StateExact && slices.Equal(got, want)
	})
}
