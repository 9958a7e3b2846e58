//go:build !unix

package router

func peekReadable(uintptr, []byte) bool { return true }

func readFD(uintptr, []byte) (int, bool, error) { return 0, false, nil }

// canPeek is whether peekReadable works on this platform: elsewhere a
// stream's relay waits inside its read, holding its buffer.
const canPeek = false
