package routerd

import (
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rolter/rolter/certs"
)

// TLS is the loaded TLS material of the router's listeners; a nil source
// serves plaintext. The sources reload themselves (certs.Source.Reload);
// the router only serves from them.
type TLS struct {
	API, Admin *certs.Source
	// AdminClientCA is --admin-client-ca: with no Raft --tls-ca, the CA
	// the other routers' admin certificates are verified with.
	AdminClientCA string
}

// wrap serves ln over TLS from src; nil src leaves it plaintext.
func wrap(ln net.Listener, src *certs.Source) net.Listener {
	if src == nil {
		return ln
	}
	return src.Listen(ln)
}

// wrapAPI puts the API's TLS (if any) on its listener.
func (r *Router) wrapAPI(ln net.Listener) net.Listener { return wrap(ln, r.tls.API) }

// Scheme is the URL scheme of a listener served from src.
func Scheme(src *certs.Source) string {
	if src == nil {
		return "http"
	}
	return "https"
}

// peerClient is the HTTP client a router uses to call the other routers'
// admin ports (the telemetry push) when its own admin port has TLS: it
// accepts a peer whose certificate chains to ca (the --tls-ca of Raft,
// which signs every router, else --admin-client-ca) whatever address it
// was found at, or without ca verifies names against the system roots;
// it presents its admin certificate when asked. nil: plain HTTP.
func (s TLS) peerClient(ca string) (*http.Client, error) {
	if s.Admin == nil {
		return nil, nil
	}
	conf := s.Admin.ClientConfig(nil)
	if ca != "" {
		roots, err := certs.LoadPool(ca)
		if err != nil {
			return nil, err
		}
		conf = s.Admin.PeerConfig(roots)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: conf}}, nil
}

// tlsPeers makes every --peer-admin URL https when this router's admin
// port has TLS: the routers of one cluster share the setting, and the
// internal token must not travel in plaintext to a peer that has it.
func tlsPeers(peers []string, admin *certs.Source) []string {
	if admin == nil {
		return peers
	}
	out := make([]string, len(peers))
	for i, p := range peers {
		if rest, ok := strings.CutPrefix(p, "http://"); ok {
			p = "https://" + rest
		}
		out[i] = p
	}
	return out
}

// peerCA is the CA a router verifies the other routers' admin
// certificates with: Raft's --tls-ca (it signs every router), else
// --admin-client-ca, else none (the system roots).
func peerCA(raftCA, adminClientCA string) string {
	if raftCA != "" {
		return raftCA
	}
	return adminClientCA
}
