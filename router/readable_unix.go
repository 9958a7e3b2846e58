//go:build unix

package router

import "syscall"

// peekReadable is a syscall.RawConn read callback: it reports whether the
// socket has a byte to read, an end or an error (anything but "would
// block"), without taking the byte. b is a one-byte scratch.
func peekReadable(fd uintptr, b []byte) bool {
	_, _, err := syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK)
	return err != syscall.EAGAIN && err != syscall.EWOULDBLOCK
}

// canPeek is whether peekReadable works on this platform.
const canPeek = true
