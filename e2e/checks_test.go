package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

// HostileLimits are the [timeouts]/[limits] values a hostile-HTTP check
// runs against (they must match the router's rolter.toml).
type HostileLimits struct {
	ReadHeader     time.Duration
	MaxBodyBytes   int64
	MaxHeaderBytes int
}

// HostileTOML is the rolter.toml fragment that sets l.
func (l HostileLimits) HostileTOML() string {
	return fmt.Sprintf("[timeouts]\nread_header = %q\n\n[limits]\nmax_body_bytes = %d\nmax_header_bytes = %d\n",
		l.ReadHeader.String(), l.MaxBodyBytes, l.MaxHeaderBytes)
}

// CheckHostileHTTP runs scenario 10's data-plane checks against api and
// logs the figures: slowloris cut, a 100 MB body refused, malformed and
// oversized requests refused. key (may be empty) is sent as the API key so
// the refusals come from the checks, not from authentication.
func CheckHostileHTTP(t *testing.T, ctx context.Context, api, key string, l HostileLimits) {
	t.Run("slowloris", func(t *testing.T) {
		held, closed, err := Slowloris(ctx, api, 100*time.Millisecond, l.ReadHeader+5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("slowloris headers (a byte line every 100ms) cut after %v (read_header %v)", held.Round(time.Millisecond), l.ReadHeader)
		if !closed || held > l.ReadHeader+2*time.Second {
			t.Errorf("connection held %v (closed %v); read_header is %v", held, closed, l.ReadHeader)
		}
	})
	t.Run("100MB body", func(t *testing.T) {
		const size = 100 << 20
		res, err := BigBody(ctx, api, key, size)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("100 MB declared body: %d after %v, %d bytes (%.1f%%) accepted by the socket before the answer",
			res.Status, res.Elapsed.Round(time.Millisecond), res.Sent, 100*float64(res.Sent)/size)
		if res.Status != http.StatusRequestEntityTooLarge {
			t.Errorf("status %d, want 413", res.Status)
		}
		if res.Elapsed > 2*time.Second || res.Sent > 16<<20 {
			t.Errorf("refusal took %v after %d bytes: the router read the body", res.Elapsed, res.Sent)
		}
	})
	for _, c := range HostileCases(l.MaxHeaderBytes) {
		t.Run(c.Name, func(t *testing.T) {
			h := http.Header{}
			if key != "" {
				h.Set("Authorization", "Bearer "+key)
			}
			for k, v := range c.Header {
				h[k] = v
			}
			code, err := RawStatus(ctx, api, "/v1/chat/completions", c.Body, h)
			if err != nil {
				t.Fatal(err)
			}
			if code != c.Want {
				t.Errorf("status %d, want %d", code, c.Want)
			}
		})
	}
}

// CheckStreamCap opens limit streams with key (long ones: maxTokens),
// checks that one more is refused with 429 while they run, and that a
// stream is admitted again once one of them ends.
func CheckStreamCap(t *testing.T, ctx context.Context, api, key string, limit, maxTokens int) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var dones []<-chan struct{}
	for i := range limit {
		s, done := StartStream(sctx, api, key, "chat", fmt.Sprintf("cap-%d", i), maxTokens)
		select {
		case <-s.First():
		case <-time.After(20 * time.Second):
			t.Fatalf("stream %d: no first token", i)
		}
		if s.Status != http.StatusOK {
			<-done
			t.Fatalf("stream %d of %d refused: %d %v", i+1, limit, s.Status, s.Events)
		}
		dones = append(dones, done)
	}
	over, done := StartStream(ctx, api, key, "chat", "cap-over", maxTokens)
	<-done
	if over.Status != http.StatusTooManyRequests {
		t.Errorf("stream %d with %d open: status %d, want 429", limit+1, limit, over.Status)
	}
	other, done := StartStream(ctx, api, "", "chat", "cap-nokey", 4)
	<-done
	if other.Status != http.StatusUnauthorized {
		t.Errorf("a stream without the key: status %d, want 401", other.Status)
	}
	cancel()
	for _, d := range dones {
		<-d
	}
	err := testwait.Poll(5*time.Second, 50*time.Millisecond, func() error {
		again, done := StartStream(ctx, api, key, "chat", "cap-again", 4)
		<-done
		if again.Status != http.StatusOK || !again.Done {
			return fmt.Errorf("status %d after the streams ended", again.Status)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	t.Logf("max_streams_per_key %d: stream %d refused with %d; admitted again once the others ended", limit, limit+1, over.Status)
}
