//go:build unix

package router

import (
	"syscall"
	"time"
)

// processCPU is this process's user + system time so far (getrusage).
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
