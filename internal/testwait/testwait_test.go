package testwait

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// recorder is a TB that keeps the failure and stops the goroutine the way
// testing.TB does.
type recorder struct {
	mu     sync.Mutex
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.failed = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

// run calls For on its own goroutine (Fatalf ends it) and returns the
// failure message, empty when For returned.
func run[C Condition](within time.Duration, what string, cond C) string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		For(r, within, what, cond)
	}()
	<-done
	return r.failed
}

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		calls := 0
		got := run(10*time.Second, "third call", func() bool {
			calls++
			return calls == 3
		})
		if got != "" {
			t.Fatalf("failed: %s", got)
		}
		if calls != 3 {
			t.Fatalf("cond called %d times, want 3", calls)
		}
		// Two pauses, 1 ms then 2 ms: the wait ends as soon as cond holds.
		if waited := time.Since(start); waited != 3*time.Millisecond {
			t.Fatalf("waited %v, want 3ms", waited)
		}
	})
}

func TestForFailsAtTheDeadlineWithTheLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		n := 0
		got := run(time.Second, "the engine to answer", func() error {
			n++
			return fmt.Errorf("attempt %d: connection refused", n)
		})
		if waited := time.Since(start); waited != time.Second {
			t.Fatalf("gave up after %v, want 1s", waited)
		}
		want := fmt.Sprintf("the engine to answer: not within 1s: attempt %d: connection refused", n)
		if got != want {
			t.Fatalf("failure %q, want %q", got, want)
		}
	})
}

func TestForFailsABoolConditionWithoutAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := run(200*time.Millisecond, "the counter to reach 5", func() bool { return false })
		if got != "the counter to reach 5: not within 200ms" {
			t.Fatalf("failure %q", got)
		}
	})
}

func TestForBacksOffToFiftyMilliseconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var at []time.Time
		run(time.Second, "never", func() error {
			at = append(at, time.Now())
			return errors.New("no")
		})
		var gaps []string
		for i := 1; i < len(at); i++ {
			gaps = append(gaps, at[i].Sub(at[i-1]).String())
		}
		// 1+2+4+8+16+32 = 63 ms, then 50 ms pauses, the last one cut to the deadline.
		want := "1ms 2ms 4ms 8ms 16ms 32ms" + strings.Repeat(" 50ms", 18) + " 37ms"
		if g := strings.Join(gaps, " "); g != want {
			t.Fatalf("pauses %s\nwant   %s", g, want)
		}
	})
}

func TestForChecksOnceMoreAfterTheLastPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		deadline := time.Now().Add(100 * time.Millisecond)
		got := run(100*time.Millisecond, "late", func() bool {
			return !time.Now().Before(deadline)
		})
		if got != "" {
			t.Fatalf("a condition true at the deadline failed: %s", got)
		}
	})
}

func TestPollReturnsTheLastErrorAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		last := errors.New("still 3 pending")
		start := time.Now()
		err := Poll(30*time.Millisecond, 5*time.Millisecond, func() error { calls++; return last })
		if !errors.Is(err, last) || !strings.Contains(err.Error(), "not within 30ms") {
			t.Fatalf("Poll = %v, want the last error wrapped with the time allowed", err)
		}
		// In the bubble's clock: checks at 0, 5, ..., 30 ms.
		if calls != 7 || time.Since(start) != 30*time.Millisecond {
			t.Errorf("%d checks over %v, want 7 over 30ms", calls, time.Since(start))
		}
	})
}

func TestPollReturnsOnceTheCheckPasses(t *testing.T) {
	calls := 0
	if err := Poll(time.Second, time.Millisecond, func() error {
		if calls++; calls < 4 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || calls != 4 {
		t.Fatalf("Poll = %v after %d checks, want nil after 4", err, calls)
	}
}
