//go:build !linux

package hangup

import (
	"errors"
	"fmt"
	"runtime"
)

// Watcher needs Linux's epoll; on this system New returns an error and
// there is no Watcher to use.
type Watcher struct{}

type registration struct{}

func (registration) watched() bool { return false }

// New reports that client departures cannot be watched here
// (errors.Is(err, errors.ErrUnsupported)); serve without a Watcher.
func New() (*Watcher, error) {
	return nil, fmt.Errorf("hangup: watching client departures needs Linux's epoll, not %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

func (w *Watcher) watch(*Conn) {
	panic("hangup: a Watcher exists only on Linux; New returned an error here")
}

func (w *Watcher) unwatch(*Conn) {}

// Close does nothing: there is no epoll set.
func (w *Watcher) Close() error { return nil }
