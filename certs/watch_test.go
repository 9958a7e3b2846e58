package certs_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/rolter/rolter/certs"
	"github.com/rolter/rolter/certs/certstest"
	"github.com/rolter/rolter/internal/testwait"
)

// TestWatchReloadsOnSignalAndOnChange: a signal reloads the pair at once;
// a renewal written without a signal is picked up by the periodic check;
// a broken renewal keeps the running certificate.
func TestWatchReloadsOnSignalAndOnChange(t *testing.T) {
	ca := certstest.NewCA(t, "cluster")
	first := ca.Valid(t, "router")
	src, err := certs.Load(certs.Files{Cert: first.Cert, Key: first.Key})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	reload := make(chan struct{})
	done := make(chan struct{})
	// The periodic check every 20 ms stands in for CheckInterval.
	go func() {
		defer close(done)
		certs.Watch(ctx, slog.New(slog.DiscardHandler), reload, 20*time.Millisecond, nil, src)
	}()
	defer func() { cancel(); <-done }()
	serving := func(want *certstest.Leaf) func() bool {
		return func() bool { return src.Leaf().SerialNumber.Cmp(want.Serial) == 0 }
	}

	second := ca.Valid(t, "router") // same files, new certificate
	reload <- struct{}{}
	testwait.For(t, 5*time.Second, "the renewal served after the signal", serving(&second))

	third := ca.Valid(t, "router")
	later := time.Now().Add(time.Minute) // past the file system's timestamp resolution
	if err := os.Chtimes(third.Cert, later, later); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "the renewal served without a signal", serving(&third))

	if err := os.WriteFile(third.Cert, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	reload <- struct{}{}
	reload <- struct{}{} // the first was handled once the second is taken
	if !serving(&third)() {
		t.Fatal("a broken renewal replaced the running certificate")
	}
}
