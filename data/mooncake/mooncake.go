// Package mooncake owns the vendored Mooncake conversation trace (Apache
// License 2.0, see README.md and LICENSE-APACHE in this directory): it
// embeds the file so the benchmarks and the demo replay it from the binary
// alone.
package mooncake

import (
	"bytes"
	_ "embed"
	"io"
)

//go:embed conversation_trace.jsonl
var trace []byte

// Name describes the embedded trace in reports.
const Name = "data/mooncake/conversation_trace.jsonl (embedded)"

// Open returns a reader over the whole trace, in the JSON-lines format
// sim/workload.ReadTrace reads.
func Open() io.Reader { return bytes.NewReader(trace) }
