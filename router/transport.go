package router

import (
	"net/http"
	"net/url"
	"os"
	"strings"
)

var envLookup = os.Getenv

// upstreamURL joins a provider's api_base with an API path. An api_base
// that already ends in /v1 (the OpenAI convention) is not given a second.
func upstreamURL(p *provider, path string) string {
	if u, ok := p.endpoints[path]; ok {
		return u.String()
	}
	return joinURL(p, path)
}

// endpointURL is upstreamURL parsed. The URLs of inferencePaths are
// parsed once per config and shared by every request: callers must not
// modify the result.
func endpointURL(p *provider, path string) (*url.URL, error) {
	if u, ok := p.endpoints[path]; ok {
		return u, nil
	}
	return url.Parse(joinURL(p, path))
}

// inferencePaths are the API paths the router proxies; build joins them
// with each provider's api_base once.
var inferencePaths = []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"}

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

// outboundHeader copies the client's headers for the upstream, minus
// hop-by-hop headers, the client's credentials and the body framing. The
// keys of in are canonical (net/http's server wrote them), so skipping
// them while copying removes what Header.Del would.
func outboundHeader(in http.Header, p *provider) http.Header {
	h := make(http.Header, len(in)+3) // + Authorization, X-Request-Id, Traceparent
	for k, v := range in {
		if forwarded(k) {
			h[k] = v
		}
	}
	if p.authHeader != "" {
		h.Set("Authorization", p.authHeader)
	}
	return h
}
