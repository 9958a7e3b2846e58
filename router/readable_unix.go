//go:build unix

package router

import (
	"io"
	"os"
	"syscall"
)

// peekReadable is a syscall.RawConn read callback: it reports whether the
// socket has a byte to read, an end or an error (anything but "would
// block"), without taking the byte. b is a one-byte scratch.
func peekReadable(fd uintptr, b []byte) bool {
	_, _, err := syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK)
	return err != syscall.EAGAIN && err != syscall.EWOULDBLOCK
}

// canPeek is whether peekReadable works on this platform.
const canPeek = true

// readFD is a syscall.RawConn read callback's read of the socket into p:
// wait reports that it would block (nothing read); a closed peer is
// io.EOF.
func readFD(fd uintptr, p []byte) (n int, wait bool, err error) {
	for {
		n, err = syscall.Read(int(fd), p)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
			return 0, true, nil
		case err != nil:
			return 0, false, os.NewSyscallError("read", err)
		case n == 0 && len(p) > 0:
			return 0, false, io.EOF
		}
		return n, false, nil
	}
}
