// Package sidecar owns what runs beside one engine: the KV-event subscriber
// (ZMQ sockets from internal/zmqsock, the module's only cgo code, behind
// the Source and Replayer interfaces), sequence tracking with replay, the residency Tracker that
// turns events into block keys (package kvblock), the engine /metrics
// scraper, the LMCache poller, the sidecar's own /metrics and /healthz, and
// the Publisher interface through which summaries leave for gossip, and
// the `rolter sidecar` process around them: ProcessConfig → Open → Run
// (process.go) announces the engine's models, joins the gossip pool and
// publishes into this process's cluster/mesh member (meshpub.go).
//
// The event decoder lives in sidecar/kvevents. See DESIGN.md for the
// residency states and what a full resync is.
//
// Goroutines: Run starts one stream goroutine (receive, replay, decode,
// apply), one residency publisher (Flush every FlushInterval, Snapshot every
// FullStateInterval), one metrics scraper, one LMCache poller and the HTTP
// server. Publisher methods are called from those goroutines, never
// concurrently with themselves, and must not block.
package sidecar
