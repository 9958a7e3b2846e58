package cluster

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rolter/rolter/cluster/raftstore"
	"google.golang.org/protobuf/proto"
)

// The Raft port carries two protocols, told apart by the first byte a
// client sends: muxRaft for hashicorp/raft's NetworkTransport and muxRPC
// for rolter's forwarding RPC (a follower handing a write to the leader,
// a new router asking to join). Both run inside the same TLS session when
// TLS is configured (mutual TLS: each side presents a certificate signed
// by the cluster CA), so forwarding needs no port of its own.
const (
	muxRaft byte = 'R'
	muxRPC  byte = 'F'
)

// maxRPCBytes bounds one forwarding message.
const maxRPCBytes = 8 << 20

// LoadTLS builds the mutual-TLS config for Raft traffic from PEM files:
// this router's certificate and key, and the CA that signs every router.
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("cluster: tls key pair: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("cluster: tls ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("cluster: tls ca %s: no certificates", caFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// muxLayer is a raft.StreamLayer over one listener that also serves the
// forwarding RPC. tlsConf nil means plaintext (InsecureDev only).
type muxLayer struct {
	ln        net.Listener
	advertise net.Addr
	tlsConf   *tls.Config
	raftConns chan net.Conn
	serveRPC  func(ctx context.Context, req *raftstore.ForwardRequest) *raftstore.ForwardResponse
	log       *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ raft.StreamLayer = (*muxLayer)(nil)

func newMuxLayer(bind string, advertise net.Addr, tlsConf *tls.Config, log *slog.Logger) (*muxLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft listen %s: %w", bind, err)
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &muxLayer{ln: ln, advertise: advertise, tlsConf: tlsConf, raftConns: make(chan net.Conn),
		log: log, ctx: ctx, cancel: cancel}
	return m, nil
}

// start begins accepting once the RPC handler is known.
func (m *muxLayer) start(serveRPC func(context.Context, *raftstore.ForwardRequest) *raftstore.ForwardResponse) {
	m.serveRPC = serveRPC
	m.wg.Add(1)
	go m.acceptLoop()
}

func (m *muxLayer) acceptLoop() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			if m.ctx.Err() != nil {
				return
			}
			m.log.Warn("raft: accept failed", "err", err)
			select {
			case <-time.After(50 * time.Millisecond):
			case <-m.ctx.Done():
				return
			}
			continue
		}
		m.wg.Add(1)
		go m.route(c)
	}
}

// route reads the protocol byte and hands the connection on.
func (m *muxLayer) route(c net.Conn) {
	defer m.wg.Done()
	if m.tlsConf != nil {
		c = tls.Server(c, m.tlsConf)
	}
	var b [1]byte
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, b[:]); err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	switch b[0] {
	case muxRaft:
		select {
		case m.raftConns <- c:
		case <-m.ctx.Done():
			c.Close()
		}
	case muxRPC:
		m.handleRPC(c)
	default:
		c.Close()
	}
}

func (m *muxLayer) handleRPC(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	var req raftstore.ForwardRequest
	if err := readFrame(r, &req); err != nil {
		return
	}
	resp := m.serveRPC(m.ctx, &req)
	_ = writeFrame(c, resp)
}

// Accept returns the next Raft connection.
func (m *muxLayer) Accept() (net.Conn, error) {
	select {
	case c := <-m.raftConns:
		return c, nil
	case <-m.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close stops the listener and waits for in-flight RPCs.
func (m *muxLayer) Close() error {
	m.cancel()
	err := m.ln.Close()
	m.wg.Wait()
	return err
}

// Addr is the advertised address.
func (m *muxLayer) Addr() net.Addr { return m.advertise }

// Dial opens a Raft connection to address.
func (m *muxLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return m.dial(context.Background(), string(address), timeout, muxRaft)
}

func (m *muxLayer) dial(ctx context.Context, address string, timeout time.Duration, proto byte) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", address)
	if err != nil {
		return nil, err
	}
	if m.tlsConf != nil {
		conf := m.tlsConf.Clone()
		if host, _, err := net.SplitHostPort(address); err == nil {
			conf.ServerName = host
		}
		c = tls.Client(c, conf)
	}
	if _, err := c.Write([]byte{proto}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Forward implements forwarder over the Raft port.
func (m *muxLayer) Forward(ctx context.Context, addr string, req *raftstore.ForwardRequest) (*raftstore.ForwardResponse, error) {
	c, err := m.dial(ctx, addr, 5*time.Second, muxRPC)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %v", ErrForward, addr, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	if err := writeFrame(c, req); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrForward, err)
	}
	var resp raftstore.ForwardResponse
	if err := readFrame(bufio.NewReader(c), &resp); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrForward, err)
	}
	return &resp, nil
}

func writeFrame(w io.Writer, msg proto.Message) error {
	b, err := proto.Marshal(msg)
	if err != nil {
		return err
	}
	var hdr [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(hdr[:], uint64(len(b)))
	if _, err := w.Write(append(hdr[:n:n], b...)); err != nil {
		return err
	}
	return nil
}

func readFrame(r *bufio.Reader, msg proto.Message) error {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return err
	}
	if n > maxRPCBytes {
		return errors.New("cluster: rpc frame too large")
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return proto.Unmarshal(b, msg)
}

// rpcMAC authenticates a forwarding request with the cluster's internal
// token (HMAC-SHA256 over every field but the MAC).
func rpcMAC(token string, req *raftstore.ForwardRequest) []byte {
	h := hmac.New(sha256.New, []byte(token))
	var kind [8]byte
	binary.BigEndian.PutUint64(kind[:], uint64(req.GetKind()))
	h.Write(kind[:])
	for _, s := range []string{req.GetNodeId(), req.GetRaftAddr()} {
		var l [8]byte
		binary.BigEndian.PutUint64(l[:], uint64(len(s)))
		h.Write(l[:])
		h.Write([]byte(s))
	}
	h.Write(req.GetCommand())
	return h.Sum(nil)
}
