// Package testwait owns the one way rolter's tests wait for something to
// happen: For polls a condition, backing off from 1 ms to 50 ms between
// tries, until it holds or the time allowed runs out, and then fails the
// test with what was awaited and the condition's last error.
//
// Waiting on a condition replaces sleeping and then asserting: a test
// that waits for the event it expects passes as soon as the event
// happens, and fails with a reason instead of flaking when the machine
// is slow. To assert that something did not happen, wait first for
// proof that the input was processed (a counter of handled messages,
// an acknowledgement), then check that the forbidden effect is absent.
package testwait

import (
	"errors"
	"fmt"
	"time"
)

// TB is the part of testing.TB a wait uses. Fatalf must stop the caller
// (testing.TB's does, through runtime.Goexit); For returns right after it
// in any case.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Condition is what For polls: a func() bool that reports whether the
// awaited state holds, or a func() error that returns nil once it holds
// and otherwise says what is still missing.
type Condition interface {
	func() bool | func() error
}

// Backoff bounds between tries.
const (
	firstPause = time.Millisecond
	maxPause   = 50 * time.Millisecond
)

var errNotYet = errors.New("condition false")

// For calls cond until it holds, pausing between tries, and fails t once
// within has passed without it holding. The failure names what and, for a
// func() error condition, the last error cond returned. cond runs on the
// caller's goroutine; it is always called at least once, and once more
// after the deadline passes, so a condition that became true during the
// last pause still counts.
func For[C Condition](t TB, within time.Duration, what string, cond C) {
	t.Helper()
	check := asCheck(cond)
	deadline := time.Now().Add(within)
	pause := firstPause
	for {
		err := check()
		if err == nil {
			return
		}
		if !time.Now().Before(deadline) {
			if errors.Is(err, errNotYet) {
				t.Fatalf("%s: not within %v", what, within)
			} else {
				t.Fatalf("%s: not within %v: %v", what, within, err)
			}
			return
		}
		time.Sleep(min(pause, time.Until(deadline)))
		pause = min(2*pause, maxPause)
	}
}

// Poll calls check every period until it returns nil, or until within
// has passed; it then returns check's last error, wrapped with the time
// allowed. It is For for measurements: a fixed period resolves the time an
// event took to that period (For's backoff would coarsen it), and the
// caller, not a test, decides what an error means.
func Poll(within, period time.Duration, check func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("not within %v: %w", within, err)
		}
		time.Sleep(min(period, time.Until(deadline)))
	}
}

// asCheck turns either form of Condition into the error form.
func asCheck[C Condition](cond C) func() error {
	switch c := any(cond).(type) {
	case func() error:
		return c
	case func() bool:
		return func() error {
			if c() {
				return nil
			}
			return errNotYet
		}
	}
	panic(fmt.Sprintf("testwait: condition of type %T", cond)) // unreachable: Condition's type set has two members
}
