package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// hostPort strips the scheme of a base URL.
func hostPort(base string) string { return strings.TrimPrefix(base, "http://") }

// Slowloris opens a connection to base and trickles request-header bytes
// (one every interval) for at most limit. It returns how long the server
// kept the connection open; ok is false when it was still open at limit.
func Slowloris(ctx context.Context, base string, interval, limit time.Duration) (time.Duration, bool, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", hostPort(base))
	if err != nil {
		return 0, false, err
	}
	defer c.Close()
	start := time.Now()
	if _, err := io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"); err != nil {
		return 0, false, err
	}
	closed := make(chan struct{})
	go func() {
		// The server closes (or answers 408 and closes): a read ends.
		_, _ = io.Copy(io.Discard, c)
		close(closed)
	}()
	t := time.NewTicker(interval)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-closed:
			return time.Since(start), true, nil
		case <-ctx.Done():
			return time.Since(start), false, ctx.Err()
		case <-t.C:
		}
		if time.Since(start) > limit {
			return time.Since(start), false, nil
		}
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := fmt.Fprintf(c, "X-Slow-%d: a\r\n", i); err != nil {
			<-closed
			return time.Since(start), true, nil
		}
	}
}

// BigBodyResult is what sending a huge declared body measured.
type BigBodyResult struct {
	Status  int
	Elapsed time.Duration // until the status line arrived
	// Sent is how many body bytes the kernel accepted from us before the
	// answer came or the connection broke (socket buffers included: an
	// upper bound on what the router could have read).
	Sent int64
}

// BigBody declares a body of size bytes on a chat request (with key as
// the API key when not empty), writes it as fast as the connection takes
// it, and reads the answer concurrently.
func BigBody(ctx context.Context, base, key string, size int64) (BigBodyResult, error) {
	var res BigBodyResult
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", hostPort(base))
	if err != nil {
		return res, err
	}
	defer c.Close()
	start := time.Now()
	auth := ""
	if key != "" {
		auth = "Authorization: Bearer " + key + "\r\n"
	}
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", auth, size)
	type answer struct {
		status int
		at     time.Duration
		err    error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			got <- answer{err: err}
			return
		}
		resp.Body.Close()
		got <- answer{status: resp.StatusCode, at: time.Since(start)}
	}()
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = 'a'
	}
	var a *answer
	for res.Sent < size {
		select {
		case x := <-got:
			a = &x
		default:
		}
		if a != nil {
			break
		}
		_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		n, err := c.Write(chunk[:min(int64(len(chunk)), size-res.Sent)])
		res.Sent += int64(n)
		if err != nil {
			break
		}
	}
	if a == nil {
		select {
		case x := <-got:
			a = &x
		case <-time.After(10 * time.Second):
			return res, errors.New("no answer within 10s")
		}
	}
	res.Status, res.Elapsed = a.status, a.at
	return res, a.err
}

// RawStatus sends one request with a raw body (any bytes) and extra
// headers, and returns the status.
func RawStatus(ctx context.Context, base, path string, body []byte, hdr http.Header) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(string(body)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// HostileCase is one request the router must refuse.
type HostileCase struct {
	Name   string
	Body   []byte
	Header http.Header
	Want   int
}

// HostileCases are the malformed and oversized requests of scenario 10
// (headerLimit is the router's [limits] max_header_bytes).
func HostileCases(headerLimit int) []HostileCase {
	return []HostileCase{
		{Name: "malformed JSON", Body: []byte(`{"model":"chat","messages":[`), Want: http.StatusBadRequest},
		{Name: "JSON array", Body: []byte(`[{"model":"chat"}]`), Want: http.StatusBadRequest},
		{Name: "trailing garbage", Body: []byte(`{"model":"chat"} {}`), Want: http.StatusBadRequest},
		{Name: "invalid UTF-8 in a string", Body: []byte("{\"model\":\"chat\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}"), Want: http.StatusBadRequest},
		{Name: "model not a string", Body: []byte(`{"model":{"$gt":""},"messages":[]}`), Want: http.StatusBadRequest},
		{Name: "bad token-id header", Body: []byte(`{"model":"chat","messages":[{"role":"user","content":"x"}]}`),
			Header: http.Header{"X-Rolter-Vllm-Token-Ids": {"1,2,banana"}}, Want: http.StatusBadRequest},
		{Name: "oversized header", Body: []byte(`{"model":"chat"}`),
			Header: http.Header{"X-Big": {strings.Repeat("h", 2*headerLimit)}}, Want: http.StatusRequestHeaderFieldsTooLarge},
	}
}
