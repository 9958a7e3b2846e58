package sidecar

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/rolter/rolter/certs"
	"github.com/rolter/rolter/certs/certstest"
	"github.com/rolter/rolter/internal/testwait"
)

// With Options.TLS the sidecar's /metrics and /healthz are served over TLS
// only, with the certificate the certs.Source holds.
func TestMetricsListenerServesTLS(t *testing.T) {
	ca := certstest.NewCA(t, "cluster")
	leaf := ca.Valid(t, "sidecar")
	src, err := certs.Load(certs.Files{Cert: leaf.Cert, Key: leaf.Key})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	sc, err := New(Config{NodeID: "n", MetricsAddr: addr}, newRecorder(t), Options{Logger: discardLog(), TLS: src.ServerConfig()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sc.Run(ctx) }()
	defer func() { cancel(); <-done }()

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	var resp *http.Response
	testwait.For(t, 5*time.Second, "the metrics listener over TLS", func() error {
		resp, err = client.Get("https://" + addr + "/healthz")
		return err
	})
	resp.Body.Close()
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].SerialNumber.Cmp(leaf.Serial) != 0 {
		t.Fatal("not served with the sidecar's certificate")
	}
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	if r, err := plain.Get("http://" + addr + "/healthz"); err == nil {
		r.Body.Close()
		if r.StatusCode == http.StatusOK {
			t.Fatal("the TLS metrics listener answered plaintext")
		}
	}
}
