package router

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

var envLookup = os.Getenv

// newTransport is the default upstream transport: pooled keep-alive
// connections, the connect timeout of the running config, no transparent
// compression (bytes pass through as the engine sent them).
func newTransport(s *Server) *http.Transport {
	d := &net.Dialer{KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			timeout := 5 * time.Second
			if sn := s.snap.Load(); sn != nil {
				timeout = sn.cfg.Timeouts.Connect.Duration
			}
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			start := time.Now()
			c, err := d.DialContext(ctx, network, addr)
			if err == nil {
				s.stages.observe(stageUpstreamConnect, start)
			}
			return c, err
		},
		// Enough idle connections per engine to absorb a burst at a few
		// thousand requests/s without closing and redialling (nginx's
		// upstream keepalive in `rolter bench overhead` is 1024 too).
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
}

// upstreamURL joins a provider's api_base with an API path. An api_base
// that already ends in /v1 (the OpenAI convention) is not given a second.
func upstreamURL(p *provider, path string) string {
	if u, ok := p.endpoints[path]; ok {
		return u
	}
	return joinURL(p, path)
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

// outboundHeader copies the client's headers for the upstream, minus
// hop-by-hop headers, the client's credentials and the body framing. The
// keys of in are canonical (net/http's server wrote them), so skipping
// them while copying removes what Header.Del would.
func outboundHeader(in http.Header, p *provider) http.Header {
	h := make(http.Header, len(in)+3) // + Authorization, X-Request-Id, Traceparent
	for k, v := range in {
		switch {
		case isHopHeader(k), k == "Authorization", k == "Content-Length", k == "Accept-Encoding", k == "Host":
			continue
		}
		h[k] = v
	}
	if p.authHeader != "" {
		h.Set("Authorization", p.authHeader)
	}
	return h
}
