package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
)

// TestBenchGossipSmall runs `rolter bench gossip` at a tiny scale and checks
// that it reports every probe converged and a near-perfect view.
func TestBenchGossipSmall(t *testing.T) {
	var out, errOut bytes.Buffer
	args := []string{"--sidecars", "2", "--routers", "2", "--blocks", "20000", "--events-per-sec", "200", "--duration", "1500ms", "--insecure"}
	if err := runBenchGossip(t.Context(), args, &out, &errOut); err != nil {
		t.Fatalf("bench failed: %v\n%s%s", err, out.String(), errOut.String())
	}
	report := out.String()
	t.Log(report)
	if !regexp.MustCompile(`unconverged=0\b`).MatchString(report) {
		t.Error("some probes never reached every router")
	}
	m := regexp.MustCompile(`accuracy under load: ([0-9.]+)%`).FindStringSubmatch(report)
	if m == nil {
		t.Fatal("no accuracy line")
	}
	if acc, _ := strconv.ParseFloat(m[1], 64); acc < 99 {
		t.Errorf("accuracy %.3f%%, want ≥ 99%%", acc)
	}
	if !regexp.MustCompile(`per block event per router: [0-9.]+ B`).MatchString(report) {
		t.Error("no bandwidth line")
	}
}

func TestBenchGossipRejectsBadFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := runBenchGossip(t.Context(), []string{"--sidecars", "0"}, &out, &errOut); err == nil {
		t.Error("zero sidecars accepted")
	}
}
