// Package e2e owns rolter's multi-process tests: it starts real `rolter`
// processes (routers with their Raft stores, sim engines) on loopback
// ports, drives them over HTTP as an operator and a client would (the
// official openai-go client included), and measures what issue 6 promises
// (policy propagation, leader election, write durability through a leader
// kill, data-plane availability), issue 10's reliability and security
// scenarios (faults, hostile input, authorization, soak) and issue 17's
// resumed streams (resume.go). RELIABILITY.md
// at the repository root lists the scenarios and their figures.
//
// The harness here is importable by other packages' tests (cmd/rolter runs
// a short version on every `go test`). Files without a build tag hold the
// short, in-process subset; the full runs live in files with the `e2e`
// build tag (go test -tags e2e ./e2e/) and the `soak` tag.
package e2e
