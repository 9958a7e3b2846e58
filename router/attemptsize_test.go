package router

import (
	"testing"
	"unsafe"
)

// Every request in flight, and every open stream, holds one attempt: it
// must stay in the 2048-byte size class (router/DESIGN.md, memory per
// stream). Past it, the allocator rounds it up to 2304 bytes.
func TestAttemptFitsIts2048ByteSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(attempt{}); n > 2048 {
		t.Fatalf("attempt is %d bytes, over the 2048-byte size class", n)
	}
}
