//go:build e2e

package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rolter/rolter/certs/certstest"
	"github.com/rolter/rolter/internal/testwait"
)

// TestTLSListeners is issue 21's TLS acceptance on a real `rolter router`
// process (standalone, one speed-1 sim): the API and admin ports serve TLS,
// admin requires client certificates from the cluster CA; a certificate
// from another CA and an expired one are refused; SIGHUP after renewing
// the API certificate serves the new one to new connections while a
// stream opened before it runs to [DONE].
func TestTLSListeners(t *testing.T) {
	bin := BuildRolter(t)
	dir := t.TempDir()
	simURL, _ := StartSimArgs(t, bin, "sim", dir, "--speed", "1")
	cfg := filepath.Join(dir, "rolter.toml")
	toml := fmt.Sprintf("[[providers]]\nname = \"e0\"\napi_base = %q\n\n[[routes]]\nmodel = \"chat\"\ntargets = [{provider = \"e0\", model = %q}]\n", simURL, SimModel)
	if err := os.WriteFile(cfg, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	ca, other := certstest.NewCA(t, "cluster"), certstest.NewCA(t, "other")
	apiLeaf, adminLeaf := ca.Valid(t, "api"), ca.Valid(t, "admin")
	addrs := FreeAddrs(t, 2)
	proc := Start(t, bin, "router", dir, "router", "--standalone", "--config", cfg, "--http", addrs[0], "--admin", addrs[1],
		"--api-tls-cert", apiLeaf.Cert, "--api-tls-key", apiLeaf.Key,
		"--admin-tls-cert", adminLeaf.Cert, "--admin-tls-key", adminLeaf.Key, "--admin-client-ca", ca.CertPEM)
	api, admin := "https://"+addrs[0], "https://"+addrs[1]

	operator := tlsHTTP(t, ca.Pool(), ca.Valid(t, "operator"))
	err := testwait.Poll(30*time.Second, 50*time.Millisecond, func() error {
		if proc.Exited() {
			return fmt.Errorf("exited:\n%s", proc.Tail(2000))
		}
		resp, err := operator.Get(admin + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("router over TLS not ready: %v", err)
	}
	refused := map[string]*http.Client{
		"client certificate from another CA": tlsHTTP(t, ca.Pool(), other.Valid(t, "intruder")),
		"expired client certificate":         tlsHTTP(t, ca.Pool(), ca.Expired(t, "stale")),
		"no client certificate":              tlsHTTP(t, ca.Pool(), certstest.Leaf{}),
		"client trusting another CA":         tlsHTTP(t, other.Pool(), ca.Valid(t, "lost")),
	}
	for name, c := range refused {
		if resp, err := c.Get(admin + "/metrics"); err == nil {
			resp.Body.Close()
			t.Errorf("admin port, %s: answered %d, want the handshake refused", name, resp.StatusCode)
		}
	}
	t.Logf("admin port: a client certificate of the cluster CA served; %d kinds refused at the handshake", len(refused))

	client := tlsHTTP(t, ca.Pool(), certstest.Leaf{})
	body := `{"model":"chat","stream":true,"max_tokens":600,"messages":[{"role":"user","content":"tell me a long story"}]}`
	resp, err := client.Post(api+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS.PeerCertificates[0].SerialNumber.Cmp(apiLeaf.Serial) != 0 {
		t.Fatalf("stream: %d, serial %v (want %v)", resp.StatusCode, resp.TLS.PeerCertificates[0].SerialNumber, apiLeaf.Serial)
	}
	sc := bufio.NewScanner(resp.Body)
	events := 0
	for events < 3 && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			events++
		}
	}

	renewed := ca.Valid(t, "api")
	hup := time.Now()
	if err := proc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	err = testwait.Poll(10*time.Second, 20*time.Millisecond, func() error {
		fresh := tlsHTTP(t, ca.Pool(), certstest.Leaf{}) // a new connection
		resp, err := fresh.Get(api + "/v1/models")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if got := resp.TLS.PeerCertificates[0].SerialNumber; got.Cmp(renewed.Serial) != 0 {
			return fmt.Errorf("serial %v, want the renewed %v", got, renewed.Serial)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("after SIGHUP: %v\n%s", err, proc.Tail(2000))
	}
	served := time.Since(hup)
	done := false
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events++
			done = done || d == "[DONE]"
		}
	}
	t.Logf("SIGHUP: new connections got the renewed certificate after %v; the stream opened before it ended after %d events, [DONE] %v (err %v)",
		served.Round(time.Millisecond), events, done, sc.Err())
	if !done || sc.Err() != nil {
		t.Fatalf("the stream opened before the reload was dropped: %d events, [DONE] %v, err %v", events, done, sc.Err())
	}
	if events < 100 {
		t.Errorf("only %d events: the stream should have outlived the reload by far", events)
	}
}

// tlsHTTP is a client trusting roots and presenting leaf (none when
// leaf.Cert is empty), on its own connections.
func tlsHTTP(t *testing.T, roots *x509.CertPool, leaf certstest.Leaf) *http.Client {
	t.Helper()
	c := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if leaf.Cert != "" {
		pair, err := tls.LoadX509KeyPair(leaf.Cert, leaf.Key)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	tr := &http.Transport{TLSClientConfig: c}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 60 * time.Second, Transport: tr}
}
