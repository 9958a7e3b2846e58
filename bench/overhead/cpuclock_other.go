//go:build !linux

package overhead

import (
	"errors"
	"time"
)

// processClock is Linux's per-process CPU clock; elsewhere the benchmark
// falls back to /proc, which is Linux's too, and counts nothing.
func processClock(int) (time.Duration, error) {
	return 0, errors.New("no per-process CPU clock on this system")
}
