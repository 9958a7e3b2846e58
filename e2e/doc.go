// Package e2e owns rolter's multi-process tests: it starts real `rolter`
// processes (routers with their Raft stores, sim engines) on loopback
// ports, drives them over HTTP as an operator and a client would (the
// official openai-go client included), and measures what issue 6 promises
// (policy propagation, leader election, write durability through a leader
// kill, data-plane availability), issue 10's reliability and security
// scenarios (faults, hostile input, authorization, soak) and issue 17's
// resumed streams (resume_harness_test.go). RELIABILITY.md at the
// repository root lists the scenarios and their figures.
//
// The package is test files only: the harness (harness_test.go,
// fleet_test.go, ...) is test code of the processes it starts, and
// nothing imports it. Files without a build tag hold the short subset,
// which runs on every `go test ./...` against one rolter binary built per
// run (SharedRolter); the full runs live in files with the `e2e` build tag
// (go test -tags e2e ./e2e/) and the `soak` tag.
package e2e
