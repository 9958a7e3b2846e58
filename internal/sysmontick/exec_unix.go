//go:build unix

package sysmontick

import (
	"runtime"
	"syscall"
	"time"
)

// reexec execs exe from a thread of its own with the given timer slack:
// the program then starts on that thread, and every thread it makes,
// sysmon first, inherits the slack. If the exec fails the thread gets its
// slack back.
func reexec(exe string, args, env []string, slack time.Duration) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if slack > 0 {
		if err := setSlack(slack); err == nil {
			defer func() { _ = setSlack(0) }() // reached only when the exec failed
		}
	}
	return syscall.Exec(exe, args, env)
}
