// Package archtest owns the test that enforces rolter's import rules (the
// package table of docs/architecture.md): it lists every package of the
// module with `go list -json` and fails on any import the rules forbid —
// Raft and memberlist outside cluster, ZMQ outside internal/zmqsock, a
// leaf package importing more than it may, the e2e harness reaching into
// the packages it tests. Each exception the architecture accepts is a
// deviation in the test's table, with the reason it is allowed.
//
// The package has no non-test code.
package archtest
