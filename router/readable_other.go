//go:build !unix

package router

func peekReadable(uintptr, []byte) bool { return true }

// canPeek is whether peekReadable works on this platform: elsewhere a
// stream's relay waits inside its read, holding its buffer.
const canPeek = false
