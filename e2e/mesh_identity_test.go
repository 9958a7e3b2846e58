//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/certs/certstest"
	"github.com/rolter/rolter/internal/testwait"
)

// rejectedBy reads rolter_gossip_rejected_total{reason} from base's
// /metrics (0 when absent).
func rejectedBy(ctx context.Context, base, reason string) float64 {
	code, body, err := Do(ctx, http.MethodGet, base+"/metrics", "", "")
	if err != nil || code != http.StatusOK {
		return 0
	}
	prefix := `rolter_gossip_rejected_total{reason="` + reason + `"} `
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// TestMeshForgedIdentity is scenario 8 with gossip identity on (issue 21,
// finding F): a router and an honest sidecar hold certificates from one CA
// (--gossip-tls-cert/-key/-ca). Hostile members written against the wire
// format forge statuses, residency and learned records in the honest
// sidecar's name: without a MAC (a member without a certificate), with a
// MAC under the key their own valid certificate shares with the router,
// and under the key of a second certificate issued
// for the honest sidecar's own name that joins under it. None may be
// applied; the honest engine's view must not move while they try, and
// rolter_gossip_rejected_total{reason} counts them.
func TestMeshForgedIdentity(t *testing.T) {
	bin := BuildRolterCgo(t)
	p := &meshPool{t: t, bin: bin, dir: t.TempDir()}
	url, proc := StartSimArgs(t, bin, "sim-0", p.dir, "--speed", "1", "--kv-blocks", "20000")
	p.Engines = append(p.Engines, &meshEngine{URL: url, Sim: proc})
	for _, f := range []struct{ name, body string }{{"rolter.toml", meshChatTOML("power_of_two")(p.Engines)},
		{"admin-token", meshToken}, {"internal-token", "mesh-e2e-internal"}} {
		if err := os.WriteFile(filepath.Join(p.dir, f.name), []byte(f.body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ca := certstest.NewCA(t, "gossip")
	rCert, sCert, liarCert := ca.Member(t, "r1", "rolter:router"), ca.Member(t, "sidecar-0", "rolter:sidecar"),
		ca.Member(t, "liar", "rolter:sidecar")
	a := FreeAddrs(t, 4)
	r := &meshRouter{ID: "r1", API: "http://" + a[0], Admin: "http://" + a[1], Gossip: a[3]}
	r.Proc = Start(t, bin, r.ID, p.dir, "router", "--config", filepath.Join(p.dir, "rolter.toml"), "--http", a[0],
		"--admin", a[1], "--node-id", r.ID, "--raft", a[2], "--data-dir", filepath.Join(p.dir, "data"), "--insecure-dev",
		"--admin-token-file", filepath.Join(p.dir, "admin-token"), "--internal-token-file", filepath.Join(p.dir, "internal-token"),
		"--bootstrap-expect", "1", "--gossip", a[3],
		"--gossip-tls-cert", rCert.Cert, "--gossip-tls-key", rCert.Key, "--gossip-tls-ca", ca.CertPEM)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := testwait.Poll(60*time.Second, 50*time.Millisecond, func() error {
		code, _, err := Do(ctx, http.MethodGet, r.Admin+"/readyz", "", "")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("readyz %d", code)
		}
		return err
	}); err != nil {
		t.Fatalf("router: %v\n%s", err, r.Proc.Tail(3000))
	}
	e0 := p.Engines[0]
	sa := FreeAddrs(t, 2)
	e0.Sidecar = Start(t, bin, "sidecar-0", p.dir, "sidecar", "--engine", e0.URL, "--node-id", "sidecar-0",
		"--gossip", sa[0], "--join", r.Gossip, "--insecure-dev", "--metrics-addr", sa[1],
		"--gossip-tls-cert", sCert.Cert, "--gossip-tls-key", sCert.Key, "--gossip-tls-ca", ca.CertPEM)
	if _, _, err := waitView(ctx, r, e0.URL, 20*time.Second, func(v clusterEngine) bool {
		return v.State != "STALE" && v.NodeID == "sidecar-0"
	}); err != nil {
		t.Fatalf("the honest sidecar never showed: %v\nrouter:\n%s\nsidecar:\n%s", err, r.Proc.Tail(3000), e0.Sidecar.Tail(2000))
	}
	// The honest figures: the sidecar reports its sim's queue (idle: 0)
	// and, without KV events, no resident block.
	honest := func() error {
		v, err := engineView(ctx, r, e0.URL)
		if err == nil && (v.Waiting == 777 || v.Running == 777 || v.State == "STALE" || v.NodeID != "sidecar-0" || v.ResidentBlocks != 0) {
			err = fmt.Errorf("engine 0 view %+v", v)
		}
		return err
	}
	if err := honest(); err != nil {
		t.Fatal(err)
	}

	// A member without a certificate and one with a valid certificate of
	// its own name; both then write in sidecar-0's name.
	plain, err := StartHostile("plain", "http://127.0.0.1:1", nil, r.Gossip)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	liar, err := StartHostileCertified("liar", "http://127.0.0.1:2", nil, r.Gossip, liarCert.Cert, liarCert.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer liar.Close()
	if err := liar.PairWith(rCert.Cert); err != nil { // the key the liar really shares with the router
		t.Fatal(err)
	}
	if err := testwait.Poll(10*time.Second, 50*time.Millisecond, func() error {
		if rejectedBy(ctx, r.Admin, "no_identity") == 0 {
			return fmt.Errorf("the member without a certificate was not refused")
		}
		return nil
	}); err != nil {
		t.Error(err)
	}

	// forge sends n messages of each kind in sidecar-0's name from each
	// forger by TCP (so each reaches the router exactly once), checking the
	// honest view every 50 messages; it returns how many went out.
	forge := func(t *testing.T, forgers []*HostileNode, n int) int {
		t.Helper()
		sent, checks := 0, 0
		for i := range n {
			for _, f := range forgers {
				as := f.As("sidecar-0")
				for _, msg := range [][]byte{
					as.Status(1<<40+uint64(i), 777, 777, 0.9),
					as.Residency(i == 0, uint64(i+1), []uint64{uint64(i)<<20 | 7}),
					as.Learned(e0.URL, uint64(i)),
				} {
					if f.SendAll(f.Seal(msg), true) == 0 {
						sent++
					}
				}
			}
			if i%50 == 0 {
				checks++
				if err := honest(); err != nil {
					t.Fatalf("after %d forged messages: %v", sent, err)
				}
			}
		}
		t.Logf("%d forged messages sent, the honest view checked %d times while they went", sent, checks)
		return sent
	}
	reasons := []string{"no_mac", "unknown_key", "bad_mac", "bad_certificate", "no_identity", "name_taken", "replay", "wrong_role"}
	counts := func() map[string]float64 {
		out := map[string]float64{}
		for _, reason := range reasons {
			out[reason] = rejectedBy(ctx, r.Admin, reason)
		}
		return out
	}

	t.Run("forged by members without the name's certificate", func(t *testing.T) {
		before := counts()
		sent := forge(t, []*HostileNode{plain, liar}, 200)
		var after map[string]float64
		err := testwait.Poll(10*time.Second, 100*time.Millisecond, func() error {
			after = counts()
			if got := after["no_mac"] - before["no_mac"] + after["bad_mac"] - before["bad_mac"]; got < float64(sent) {
				return fmt.Errorf("rejected %.0f of %d", got, sent)
			}
			return nil
		})
		t.Logf("08F forged (no MAC, and a MAC under the forger's own certificate): %d sent in sidecar-0's name: rejected no_mac +%.0f, "+
			"bad_mac +%.0f; honest view unchanged", sent, after["no_mac"]-before["no_mac"], after["bad_mac"]-before["bad_mac"])
		if err != nil {
			t.Error(err)
		}
		if sent < 1000 {
			t.Errorf("only %d forged messages went out", sent)
		}
		if err := honest(); err != nil {
			t.Error(err)
		}
	})

	t.Run("a second certificate for the honest name", func(t *testing.T) {
		twinCert := ca.Member(t, "sidecar-0", "rolter:sidecar") // same name, another key (the honest sidecar has read its own)
		before := counts()
		twin, err := StartHostileCertified("sidecar-0", e0.URL, nil, r.Gossip, twinCert.Cert, twinCert.Key)
		if err != nil {
			t.Logf("twin join failed outright: %v", err)
			return
		}
		defer twin.Close()
		if err := twin.PairWith(rCert.Cert); err != nil {
			t.Fatal(err)
		}
		if err := testwait.Poll(10*time.Second, 50*time.Millisecond, func() error {
			if counts()["name_taken"] == before["name_taken"] {
				return fmt.Errorf("the twin's join under sidecar-0 was not refused")
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
		sent := forge(t, []*HostileNode{twin}, 400)
		var after map[string]float64
		err = testwait.Poll(10*time.Second, 100*time.Millisecond, func() error {
			after = counts()
			if got := after["bad_mac"] - before["bad_mac"]; got < float64(sent) {
				return fmt.Errorf("bad MACs %.0f of %d", got, sent)
			}
			return nil
		})
		logLine := strings.Contains(r.Proc.Tail(20000), "gossip join refused") &&
			strings.Contains(r.Proc.Tail(20000), "held_by="+sa[0])
		t.Logf("08F twin (a valid certificate for sidecar-0, another key): join refused (name_taken +%.0f, log names both addresses: %v); "+
			"%d forged messages with a MAC under its key: bad_mac +%.0f; honest view unchanged",
			after["name_taken"]-before["name_taken"], logLine, sent, after["bad_mac"]-before["bad_mac"])
		if err != nil {
			t.Error(err)
		}
		if !logLine {
			t.Errorf("no log line naming the holder's address:\n%s", r.Proc.Tail(3000))
		}
		if err := honest(); err != nil {
			t.Error(err)
		}
	})
}
