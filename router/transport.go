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

// headerOf builds an http.Header of fields (key and value pairs from
// fasthttp's header, keys canonical), in order, a repeated key's values
// together. The keys and values share one string, and the values one
// backing array: values when it is long enough, else a new one. spare is
// room in the map for fields the caller adds. fields is only read.
func headerOf(fields [][2][]byte, values []string, spare int) http.Header {
	h := make(http.Header, len(fields)+spare)
	if len(fields) == 0 {
		return h
	}
	size := 0
	for _, f := range fields {
		size += len(f[0]) + len(f[1])
	}
	// The builder's bytes become the string without a copy.
	var all strings.Builder
	all.Grow(size)
	for _, f := range fields {
		all.Write(f[0])
		all.Write(f[1])
	}
	text := all.String()
	if len(fields) > len(values) {
		values = make([]string, len(fields))
	}
	at := 0
	for i, f := range fields {
		key := text[at : at+len(f[0])]
		at += len(key)
		values[i] = text[at : at+len(f[1])]
		at += len(values[i])
		if prev, ok := h[key]; ok {
			h[key] = append(prev, values[i])
		} else {
			h[key] = values[i : i+1 : i+1]
		}
	}
	return h
}

// inlineHeaders is how many header values an upstream call keeps in
// itself (call.values): an engine's response has four to six fields
// (date, server, content-type, content-length or transfer-encoding, a
// request id). The field list a conversion passes to headerOf holds twice
// as many on the stack.
const inlineHeaders = 8
