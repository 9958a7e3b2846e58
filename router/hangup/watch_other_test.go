//go:build !linux

package hangup

import (
	"errors"
	"testing"
)

// Without epoll there is no watcher: New says so, and the server keeps
// its own departure signal.
func TestNewFailsWithoutEpoll(t *testing.T) {
	w, err := New()
	if w != nil || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("New() = %v, %v; want no Watcher and errors.ErrUnsupported", w, err)
	}
}
