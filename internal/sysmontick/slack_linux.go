package sysmontick

import (
	"syscall"
	"time"
)

// prSetTimerSlack is prctl's PR_SET_TIMERSLACK.
const prSetTimerSlack = 29

// setSlack sets the calling thread's timer slack (0: back to its default).
func setSlack(d time.Duration) error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, uintptr(d.Nanoseconds()), 0); e != 0 {
		return e
	}
	return nil
}
