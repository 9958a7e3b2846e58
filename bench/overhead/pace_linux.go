package overhead

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// pacer is the open loop's clock: a timerfd read through Go's network
// poller, which wakes the generator within tens of microseconds of a
// request's scheduled time. time.Sleep cannot: the runtime waits for
// timers in epoll_pwait, whose timeout is whole milliseconds, so a
// sleep shorter than 1 ms lasted about 1 ms here and every request
// started about 0.5 ms after its scheduled time, which its latency
// counts (direct's p50 was 630-700 µs, most of it that).
type pacer struct {
	fd  int
	f   *os.File
	buf [8]byte
}

// newPacer returns a pacer, or nil (time.Sleep) when no timerfd can be
// made.
func newPacer() *pacer {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	return &pacer{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}
}

// sleep waits d.
func (p *pacer) sleep(d time.Duration) {
	if p == nil {
		time.Sleep(d)
		return
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(d.Nanoseconds())}
	if err := unix.TimerfdSettime(p.fd, 0, &spec, nil); err != nil {
		time.Sleep(d)
		return
	}
	if _, err := p.f.Read(p.buf[:]); err != nil {
		time.Sleep(d)
	}
}

func (p *pacer) close() {
	if p != nil {
		_ = p.f.Close()
	}
}
