// Package router owns rolter's data plane: the OpenAI-compatible HTTP
// surface (/v1/chat/completions, /v1/completions, /v1/embeddings,
// /v1/models) on fasthttp's server or net/http's (front.go,
// front_fast.go: one proxy behind two small interfaces), API-key checks, prompt extraction into a
// strategies.RouteContext, per-attempt eligibility (tried, parked, healthy,
// breaker), the streaming proxy with retries before the first byte and,
// on routes that opt in, broken streams resumed on another target
// (resume.go, splice.go), the upstream client (client.go: fasthttp's
// connection pool, driven from the handler's goroutine), circuit
// breakers, active health checks,
// in-flight load tracking, the immutable routing snapshot that a config
// change swaps in atomically, and each request's observation: its
// x-request-id and routing headers, its OpenTelemetry spans (route, pick,
// attempt), the per-stage timing histograms and the request log line.
//
// Concurrency: a Server is safe for concurrent use. Requests read the
// current *snapshot through an atomic pointer and never lock on the hot
// path except for the small per-provider state transitions (breaker).
// Apply may be called at any time from any goroutine (the control plane
// pushes new configs); learned state (strategies.Tracker, breaker, health,
// parking) lives in the Server and survives Apply.
//
// Cluster state reaches the router only through the consumer interfaces
// declared in mesh.go (EngineView, SourceFactory, Learner); a nil value
// means "no mesh": loads are this router's in-flight counts, the
// cache/adapter signals are absent, which every strategy treats as
// neutral, and nothing learned is shared with other routers.
package router
