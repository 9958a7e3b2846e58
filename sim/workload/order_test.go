package workload

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// The first request's target holds its response until the second request
// arrives (or a second passes). Both are scheduled at the start. Without
// InOrder the second goes at once and frees the first; with InOrder it
// waits for the first's response, which comes only when the hold gives
// up, unless OrderWait ends the wait sooner. Every request carries its
// scheduled time, however late it left.
func TestReplayInOrderWaitsForThePreviousResponse(t *testing.T) {
	const hold = time.Second
	tests := []struct {
		name          string
		inOrder       bool
		orderWait     time.Duration
		freedBySecond bool
	}{
		{"not in order", false, 0, true},
		{"in order", true, time.Minute, false},
		{"in order, bounded wait", true, 100 * time.Millisecond, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			second := make(chan struct{})
			freed := make(chan bool, 1)
			stamps := make(chan int64, 2)
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ns, _ := strconv.ParseInt(r.Header.Get("X-Sent-At"), 10, 64)
				stamps <- ns
				if r.Header.Get("X-Request-Id") == "first" {
					select {
					case <-second:
						freed <- true
					case <-time.After(hold):
						freed <- false
					}
				} else {
					close(second)
				}
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = w.Write([]byte("data: {\"choices\":[{\"text\":\"x\"}]}\n\ndata: [DONE]\n\n"))
			}))
			defer ts.Close()
			reqs := []Request{{ID: "first", Tokens: []uint32{1}, MaxTokens: 1}, {ID: "second", Tokens: []uint32{2}, MaxTokens: 1}}
			start := time.Now()
			res := Replay(context.Background(), ReplayConfig{Target: ts.URL, Mode: ModeCompletions, InOrder: tc.inOrder,
				OrderWait: tc.orderWait, SentAtHeader: "X-Sent-At"}, reqs)
			if len(res) != 2 || res[0].Err != "" || res[1].Err != "" {
				t.Fatalf("results %+v", res)
			}
			if got := <-freed; got != tc.freedBySecond {
				t.Errorf("first freed by the second's arrival: %v, want %v", got, tc.freedBySecond)
			}
			if tc.inOrder && res[1].Late < min(tc.orderWait, hold) {
				t.Errorf("second sent %v late; it should have waited for the first (or %v)", res[1].Late, tc.orderWait)
			}
			for range 2 {
				if at := time.Unix(0, <-stamps); at.Before(start) || !at.Before(start.Add(hold/2)) {
					t.Errorf("stamped %v after the start, want the scheduled time (the start)", at.Sub(start))
				}
			}
		})
	}
}
