package engine_test

import (
	"fmt"
	"time"

	"github.com/rolter/rolter/sim/engine"
)

// A discrete-event simulator advances the engine to each arrival, submits
// it, and finally runs the engine dry; nothing sleeps.
func Example() {
	e := engine.New(engine.Config{})
	prompt := make([]uint32, 1024)
	arrivals := []time.Duration{0, 50 * time.Millisecond}
	var done []engine.Completion
	for i, at := range arrivals {
		for _, s := range e.AdvanceTo(at) {
			done = append(done, s.Completed...)
		}
		_ = e.Submit(engine.Request{ID: fmt.Sprint(i), Tokens: prompt, MaxTokens: 8, Arrival: at})
	}
	for _, s := range e.AdvanceTo(time.Hour) {
		done = append(done, s.Completed...)
	}
	for _, c := range done {
		fmt.Printf("%s cached=%d ttft=%v\n", c.ID, c.CachedTokens, c.TTFT().Round(time.Millisecond))
	}
	// Output:
	// 0 cached=0 ttft=67ms
	// 1 cached=1008 ttft=25ms
}
