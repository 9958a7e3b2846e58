//go:build linux

package hangup

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// departures is what a connection is registered for: the peer's FIN
// (EPOLLRDHUP), a hang-up or an error (RST). Never EPOLLIN: a client's
// next request is not a departure. EPOLLONESHOT: one event per
// connection, after which it stays in the set, disabled, until Close
// takes it out.
const departures = unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR | unix.EPOLLONESHOT

// wakeSlot is the event data of the eventfd Close writes to.
const wakeSlot int32 = -1

// Watcher is one epoll set of accepted connections and the goroutine that
// waits on it. Listener's Accept registers connections, a Conn's Close
// takes them out; both may run on any goroutine. The waiting goroutine
// only cancels contexts.
//
// A closed connection's file descriptor number can be reused at once by
// the next accepted connection, possibly before the waiting goroutine has
// handled an event the old one raised. So an event names a slot and the
// slot's generation, never the descriptor: a slot's generation changes
// each time it is taken, and an event for an earlier generation is
// dropped.
type Watcher struct {
	epfd, wakefd int
	// ep is epfd on Go's poller: the waiting goroutine parks there until
	// the set has events, never in a blocking epoll_wait holding a thread
	// and, while it blocks, the scheduler's P (a P stuck in a system call
	// waits for sysmon to take it back, up to 10 ms once sysmon's tick
	// has backed off).
	ep *os.File

	// life guards the epoll descriptor's lifetime: epoll_ctl runs under
	// the read lock, Close sets closed under the write lock and only then
	// closes the descriptor.
	life   sync.RWMutex
	closed bool

	mu    sync.Mutex
	slots []slot
	free  []uint32 // indexes into slots not taken

	done chan struct{} // closed when the waiting goroutine returns
	err  error         // why it returned, when not for Close
}

type slot struct {
	gen uint32
	c   *Conn // nil while the slot is free
}

// registration is where a Conn sits in its Watcher's epoll set.
type registration struct {
	raw       syscall.RawConn // nil: not registered
	slot, gen uint32
}

func (r registration) watched() bool { return r.raw != nil }

// New creates the epoll set and starts the goroutine that waits on it.
func New() (*Watcher, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("hangup: epoll_create1: %w", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(epfd)
		return nil, fmt.Errorf("hangup: eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: wakeSlot}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		_ = unix.Close(wakefd)
		_ = unix.Close(epfd)
		return nil, fmt.Errorf("hangup: epoll_ctl: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		_ = unix.Close(wakefd)
		_ = unix.Close(epfd)
		return nil, fmt.Errorf("hangup: epoll set non-blocking: %w", err)
	}
	ep := os.NewFile(uintptr(epfd), "hangup-epoll")
	raw, err := ep.SyscallConn()
	if err != nil {
		_ = unix.Close(wakefd)
		_ = ep.Close()
		return nil, fmt.Errorf("hangup: epoll set on the poller: %w", err)
	}
	w := &Watcher{epfd: epfd, wakefd: wakefd, ep: ep, done: make(chan struct{})}
	go w.wait(raw)
	return w, nil
}

// wait is the one goroutine: it parks on Go's poller until the epoll set
// has events, takes them without blocking (epoll_wait with no timeout)
// and cancels the context of each connection whose client has gone.
func (w *Watcher) wait(raw syscall.RawConn) {
	defer close(w.done)
	events := make([]unix.EpollEvent, 64)
	for {
		var n int
		var werr error
		// The poller calls this first, and again each time the set turns
		// readable; false (no event yet) parks until then.
		err := raw.Read(func(fd uintptr) bool {
			for {
				n, werr = unix.EpollWait(int(fd), events, 0)
				if werr != unix.EINTR {
					return n > 0 || werr != nil
				}
			}
		})
		if err == nil {
			err = werr
		}
		if err != nil {
			w.err = fmt.Errorf("hangup: epoll_wait: %w; client departures are no longer watched", err)
			return
		}
		for i := range events[:n] {
			ev := &events[i]
			if ev.Fd == wakeSlot {
				return
			}
			w.depart(uint32(ev.Fd), uint32(ev.Pad))
		}
	}
}

// depart cancels the connection in slot i if the slot still holds the
// generation the event was registered with.
func (w *Watcher) depart(i, gen uint32) {
	w.mu.Lock()
	var c *Conn
	if int(i) < len(w.slots) && w.slots[i].gen == gen {
		c = w.slots[i].c
	}
	w.mu.Unlock()
	if c != nil {
		c.cancel(ErrDeparted)
	}
}

// watch registers c. On failure c stays unregistered (Watched is false)
// and is served without a departure signal.
func (w *Watcher) watch(c *Conn) {
	raw, err := c.TCPConn.SyscallConn()
	if err != nil {
		return
	}
	w.life.RLock()
	defer w.life.RUnlock()
	if w.closed {
		return
	}
	i, gen := w.take(c)
	var ctlErr error
	err = raw.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: departures, Fd: int32(i), Pad: int32(gen)}
		ctlErr = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err != nil || ctlErr != nil {
		w.release(i)
		return
	}
	c.reg = registration{raw: raw, slot: i, gen: gen}
}

// unwatch takes c out of the epoll set; its descriptor is still open.
func (w *Watcher) unwatch(c *Conn) {
	r := c.reg
	if r.raw == nil {
		return
	}
	w.life.RLock()
	if !w.closed {
		_ = r.raw.Control(func(fd uintptr) {
			_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
		})
	}
	w.life.RUnlock()
	w.release(r.slot)
}

func (w *Watcher) take(c *Conn) (i, gen uint32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.free); n > 0 {
		i = w.free[n-1]
		w.free = w.free[:n-1]
	} else {
		i = uint32(len(w.slots))
		w.slots = append(w.slots, slot{})
	}
	s := &w.slots[i]
	s.gen++
	s.c = c
	return i, s.gen
}

func (w *Watcher) release(i uint32) {
	w.mu.Lock()
	w.slots[i].c = nil
	w.free = append(w.free, i)
	w.mu.Unlock()
}

// Close stops the waiting goroutine and closes the epoll set. Call it
// after the servers using its listeners have stopped: a connection still
// open stays usable, but its client's departure is no longer reported
// (its Context still ends when it is closed). It returns the error that
// stopped the waiting goroutine earlier, if one did.
func (w *Watcher) Close() error {
	w.life.Lock()
	if w.closed {
		w.life.Unlock()
		return nil
	}
	w.closed = true
	w.life.Unlock()
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	if _, err := unix.Write(w.wakefd, one[:]); err != nil {
		return fmt.Errorf("hangup: waking the watcher: %w", err)
	}
	<-w.done
	_ = w.ep.Close()
	_ = unix.Close(w.wakefd)
	return w.err
}
