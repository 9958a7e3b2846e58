package kvevents

import (
	"errors"
	"strings"
)

// ErrNoCgo is returned by Listen in a build without cgo: the ZMQ sockets
// need libzmq through cgo.
var ErrNoCgo = errors.New("kvevents: KV events need a cgo build with libzmq (rebuild with CGO_ENABLED=1)")

// Dial selects whether the PUB socket binds or connects.
type Dial uint8

const (
	// DialAuto follows vLLM: bind when the endpoint has "*" or "::" or is
	// ipc:// or inproc://, otherwise connect (the subscriber binds).
	DialAuto Dial = iota
	// DialBind always binds.
	DialBind
	// DialConnect always connects.
	DialConnect
)

// ShouldBind reports whether a PUB socket on endpoint binds under d.
func (d Dial) ShouldBind(endpoint string) bool {
	switch d {
	case DialBind:
		return true
	case DialConnect:
		return false
	}
	return strings.Contains(endpoint, "*") || strings.Contains(endpoint, "::") ||
		strings.HasPrefix(endpoint, "ipc://") || strings.HasPrefix(endpoint, "inproc://")
}
