// Package raftstore holds the protobuf wire format of rolter's Raft store:
// log entries (Command), FSM snapshots (Snapshot) and the forwarding RPC
// between routers. The Go code is generated from raftstore.proto; the
// cluster package owns all behaviour.
package raftstore

// Regenerate with protoc (apt-get install protobuf-compiler) and the
// protoc-gen-go matching go.mod's google.golang.org/protobuf:
//
//go:generate go build -o .protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
//go:generate protoc --plugin=protoc-gen-go=.protoc-gen-go --go_out=. --go_opt=paths=source_relative raftstore.proto
//go:generate rm -f .protoc-gen-go
