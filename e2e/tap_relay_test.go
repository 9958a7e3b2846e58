package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTapKeepsTheEngineConnectionWhileItAnswers is the interleaving that
// broke one stream in three runs of TestShortFirstTokenFailover: the
// tap's transport had sent the request body to the engine but had not
// yet finished with it when the engine's answer came back and the tap
// began relaying it. Writing the answer's headers, the tap's server
// closes the request body; the transport, still reading that body (to
// check it held no more than its Content-Length), got "invalid Read on
// closed Body" and closed its connection to the engine under the
// answer: the router saw "unexpected EOF" after the first event from a
// healthy engine. A connection whose writes return only once the
// client has the answer's headers holds the transport at that point
// every time.
func TestTapKeepsTheEngineConnectionWhileItAnswers(t *testing.T) {
	answered := make(chan struct{}) // the client has the answer's first event
	engine := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_, _ = io.WriteString(w, "data: {\"n\":0}\n\n")
		_ = rc.Flush()
		// The rest of the answer leaves once the first event is with the
		// client, unless the tap's connection closes first: had it gone
		// out at once, the tap would have read it before the close.
		select {
		case <-answered:
		case <-r.Context().Done():
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		for i := 1; i < 4; i++ {
			_, _ = fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
			_ = rc.Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = engine.Serve(ln) }()
	t.Cleanup(func() { _ = engine.Close() })

	tp := StartTap(t, "http://"+ln.Addr().String())
	dial := tp.transport.DialContext
	tp.transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &lateConn{Conn: c, until: answered}, nil
	}

	// Like the router's upstream body, not one of the standard library's
	// in-memory readers: the client's transport sends the headers first.
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tp.URL+"/v1/chat/completions", io.NopCloser(strings.NewReader(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	client := &http.Transport{}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			events = append(events, line)
			if len(events) == 1 {
				close(answered)
			}
		}
	}
	if len(events) == 0 || events[len(events)-1] != "data: [DONE]" {
		t.Errorf("the stream through the tap ended without [DONE] (%v): %q", sc.Err(), events)
	}
}

// lateConn passes every write after the first on at once but returns from
// it only when until closes (or after 5 s): the writer is held right
// after its bytes left.
type lateConn struct {
	net.Conn
	until  <-chan struct{}
	writes int
}

func (c *lateConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if c.writes++; c.writes > 1 {
		select {
		case <-c.until:
		case <-time.After(5 * time.Second):
		}
	}
	return n, err
}
