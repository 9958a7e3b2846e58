package overhead

import (
	"syscall"
	"time"
	"unsafe"
)

// processClock reads the kernel's CPU clock of process pid
// (clock_getcpuclockid(3): CPUCLOCK_SCHED of the whole thread group), the
// nanoseconds all its threads, live and exited, have run.
func processClock(pid int) (time.Duration, error) {
	const cpuclockSched = 2
	id := int64(^pid)<<3 | cpuclockSched
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, uintptr(id), uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0, e
	}
	return time.Duration(ts.Nano()), nil
}
