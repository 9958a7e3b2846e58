package router

import (
	"net/url"
	"os"
	"strings"

	"github.com/valyala/fasthttp"
)

var envLookup = os.Getenv

// endpointURL joins a provider's api_base with an API path (joinURL). The
// URLs of inferencePaths are parsed once per config and shared by every
// request: callers must not modify the result.
func endpointURL(p *provider, path string) (*url.URL, error) {
	if u, ok := p.endpoints[path]; ok {
		return u, nil
	}
	return url.Parse(joinURL(p, path))
}

// inferencePaths are the API paths the router proxies; build joins them
// with each provider's api_base once.
var inferencePaths = []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"}

// joinURL is api_base and path joined: an api_base that already ends in
// /v1 (the OpenAI convention) is not given a second.
func joinURL(p *provider, path string) string {
	base := strings.TrimSuffix(p.base.Path, "/")
	if strings.HasSuffix(base, "/v1") {
		path = strings.TrimPrefix(path, "/v1")
	}
	u := *p.base
	u.Path = base + path
	u.RawPath = ""
	u.RawQuery = ""
	u.Fragment = ""
	return u.String()
}

// hopHeaders are connection-scoped and never forwarded.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// isHopHeader reports whether the canonical header key k is in hopHeaders.
func isHopHeader(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// forwarded reports whether a client's header (canonical key k) goes to
// the engine: not hop-by-hop, not the client's credentials, the body
// framing, the client's encodings or Host.
func forwarded(k string) bool {
	switch {
	case isHopHeader(k), k == "Authorization", k == "Content-Length", k == "Accept-Encoding", k == "Host":
		return false
	}
	return true
}

// upstreamAuth sets the provider's Authorization on the engine's header
// (the client's is never forwarded).
func upstreamAuth(h *fasthttp.RequestHeader, p *provider) {
	if p.authHeader != "" {
		h.SetCanonical(bytesOf("Authorization"), bytesOf(p.authHeader))
	}
}

// engineFields calls f with each field of the engine's response header
// the client gets (hop-by-hop ones left out), in the engine's order;
// again reports a key an earlier field had, so that a repeated field
// (Set-Cookie) adds its values in order while a first one replaces what
// the answer had under its key.
func engineFields(src *fasthttp.ResponseHeader, f func(k, v []byte, again bool)) {
	var inline [16][]byte
	seen := inline[:0]
	for k, v := range src.All() {
		if isHopHeader(view(k)) {
			continue
		}
		again := false
		for _, s := range seen {
			if string(s) == string(k) {
				again = true
				break
			}
		}
		if !again {
			seen = append(seen, k)
		}
		f(k, v, again)
	}
}
