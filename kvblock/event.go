package kvblock

// EventKind is the tag of a KV-cache event in an engine's stream: the
// three kinds vLLM publishes, named once for the simulator that encodes
// them and the sidecar that decodes them.
type EventKind uint8

// The event kinds vLLM publishes. 0 is no kind (an unknown tag).
const (
	BlockStored EventKind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

// String returns the wire tag of k ("BlockStored", ...), "Unknown" for
// any other value.
func (k EventKind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "Unknown"
}
