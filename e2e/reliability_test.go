//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

// reliabilityLimits are the hostile-HTTP limits of the suite's rolter.toml.
var reliabilityLimits = HostileLimits{ReadHeader: time.Second, MaxBodyBytes: 1 << 20, MaxHeaderBytes: 16 << 10}

// reliabilityExtra is the local part of the suite's rolter.toml: short
// header timeout and small limits (scenario 10), a 2 s first-byte timeout
// (scenario 3's hanging engine), providers limited to http(s) on
// 127.0.0.1. The breaker, retries and health checks keep their defaults.
func reliabilityExtra() string {
	l := reliabilityLimits
	return fmt.Sprintf(`[timeouts]
read_header = %q
first_byte = "2s"

[limits]
max_body_bytes = %d
max_header_bytes = %d
max_streams_per_key = 2
allowed_schemes = ["http", "https"]
allowed_hosts = ["127.0.0.1"]

[[provider_groups]]
name = "fleet"
slug = "fleet"
strategy = "round_robin"
members = [{ provider = "e0", model = "m" }]

[[models]]
model = "m"
price_in_per_mtok = 0.1
price_out_per_mtok = 0.2
`, l.ReadHeader.String(), l.MaxBodyBytes, l.MaxHeaderBytes)
}

// TestReliability is issue 10's multi-process suite: 3 `rolter router`
// processes on Raft and 4 `rolter sim` engines (each behind a counting
// tap), driven with the official openai-go client and raw HTTP. The
// scenarios share one fleet and run in an order where each leaves it
// usable for the next: authorization (9), hostile HTTP (10), first-token
// failover (3), all engines 503 (4), an engine killed mid-stream (2) and
// restarted, the Raft leader killed under load (1), then the scan of every
// process's log for secrets (9).
func TestReliability(t *testing.T) {
	bin := BuildRolter(t)
	dir := t.TempDir()
	var engines []*Engine
	for i := range 4 {
		name := fmt.Sprintf("e%d", i)
		url, proc := StartSimArgs(t, bin, "sim-"+name, dir, "--speed", "1", "--seed", fmt.Sprint(i+1))
		engines = append(engines, &Engine{Name: name, URL: url, Tap: StartTap(t, url), Proc: proc})
	}
	c := StartCluster(t, ClusterOptions{Bin: bin, N: 3, Dir: dir, Config: FleetTOML(engines, reliabilityExtra())})
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	var apis []string
	for _, r := range c.Routers {
		apis = append(apis, r.API)
	}
	const internalToken = "e2e-internal-token"
	secrets := []string{c.Token, internalToken}
	admin := c.Routers[1].Admin

	t.Run("09 authorization matrix", func(t *testing.T) {
		principals := []Principal{{"none", ""}, {"wrong", "rolter-admin-not-a-real-token"}, {"internal", internalToken}}
		for _, role := range []string{"viewer", "admin", "superadmin"} {
			tok, err := CreateToken(ctx, admin, c.Token, "matrix-"+role, role)
			if err != nil {
				t.Fatal(err)
			}
			secrets = append(secrets, tok)
			principals = append(principals, Principal{role, tok})
		}
		cells, created, err := AuthMatrix(ctx, admin, "e0", principals)
		secrets = append(secrets, created...)
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for _, cell := range cells {
			if !cell.Ok() {
				bad++
				t.Errorf("%s %s as %s: %d, want %d (%.200s)", cell.Endpoint.Method, cell.Endpoint.Path, cell.Principal, cell.Got, cell.Want, cell.Body)
			}
		}
		t.Logf("authorization matrix: %d endpoints × %d principals = %d calls, %d mismatches", len(AdminEndpoints), len(principals), len(cells), bad)
	})

	t.Run("10 hostile HTTP", func(t *testing.T) {
		CheckHostileHTTP(t, ctx, apis[0], "", reliabilityLimits)
		t.Run("provider URLs (SSRF)", func(t *testing.T) {
			for i, sc := range SSRFCases {
				name := fmt.Sprintf("ssrf-%d", i)
				code, b, err := Do(ctx, http.MethodPost, admin+"/api/v1/providers", c.Token,
					fmt.Sprintf(`{"name":%q,"api_base":%q}`, name, sc.Base))
				if err != nil || code != sc.Want {
					t.Errorf("POST provider %s: %d %s %v, want %d", sc.Base, code, b, err, sc.Want)
				}
				if sc.Want == http.StatusCreated {
					_, _, _ = Do(ctx, http.MethodDelete, admin+"/api/v1/providers/"+name, c.Token, "")
					continue
				}
				code, _, err = Do(ctx, http.MethodPut, admin+"/api/v1/providers/e0", c.Token, fmt.Sprintf(`{"api_base":%q}`, sc.Base))
				if err != nil || code != http.StatusBadRequest {
					t.Errorf("PUT provider e0 to %s: %d %v, want 400", sc.Base, code, err)
				}
				if code/100 == 2 {
					_, _, _ = Do(ctx, http.MethodDelete, admin+"/api/v1/providers/"+name, c.Token, "")
				}
			}
			t.Logf("%d provider base URLs checked (file, gopher, ftp, metadata, other hosts, userinfo, scheme-relative)", len(SSRFCases))
		})
		t.Run("stream cap per key", func(t *testing.T) {
			code, b, err := Do(ctx, http.MethodPost, admin+"/api/v1/keys", c.Token, `{"name":"cap","models":["chat"]}`)
			if err != nil || code != http.StatusCreated {
				t.Fatalf("create key: %d %s %v", code, b, err)
			}
			key, err := jsonString(b, "secret")
			if err != nil {
				t.Fatal(err)
			}
			secrets = append(secrets, key)
			defer func() {
				_, _, _ = Do(ctx, http.MethodDelete, admin+"/api/v1/keys/cap", c.Token, "")
				if err := waitOpen(ctx, apis, true); err != nil {
					t.Error(err)
				}
			}()
			if err := waitOpen(ctx, apis, false); err != nil {
				t.Fatal(err)
			}
			CheckStreamCap(t, ctx, apis[0], key, 2, 4000)
		})
	})

	t.Run("03 first-token failover", func(t *testing.T) {
		victim := engines[0]
		victim.Tap.SetDown(true)
		res := FirstTokenFailover(ctx, apis[0], victim.Tap, 12, 16)
		victim.Tap.SetDown(false)
		t.Logf("engine answering 503: %d of %d answers clean, the failing engine saw %d attempts", res.Clean, res.Requests, res.VictimAttempts)
		assertClean(t, res)

		code, b, err := Do(ctx, http.MethodPost, victim.URL+"/sim/faults", "", `{"hang_rate":1}`)
		if err != nil || code != http.StatusOK {
			t.Fatalf("setting faults: %d %s %v", code, b, err)
		}
		res = FirstTokenFailover(ctx, apis[1], victim.Tap, 8, 16)
		_, _, _ = Do(ctx, http.MethodPost, victim.URL+"/sim/faults", "", `{"hang_rate":0}`)
		t.Logf("engine hanging before its first token (first_byte 2s): %d of %d answers clean, the failing engine saw %d attempts",
			res.Clean, res.Requests, res.VictimAttempts)
		assertClean(t, res)
	})

	t.Run("04 every engine 503", func(t *testing.T) {
		const n = 300
		res, err := RetryBudget(ctx, apis, engines, n, 6*time.Second)
		bound := BudgetBound(n, len(apis), len(engines), res.Window)
		t.Logf("%d client requests while all 4 engines answered 503 for %v (over 3 routers, default config): statuses %v; %d upstream attempts counted at the engines (bound %d); traffic back on every router %v after the engines recovered",
			res.Requests, res.Window.Round(time.Millisecond), res.Statuses, res.Attempts, bound, res.Recovery.Round(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if res.Attempts > bound {
			t.Errorf("%d attempts > %d: a retry storm", res.Attempts, bound)
		}
		if res.Recovery > 10*time.Second {
			t.Errorf("recovery %v > 10s", res.Recovery)
		}
	})

	t.Run("02 engine killed mid-stream", func(t *testing.T) {
		const breakerOpen = 30 * time.Second // the default [breaker] open
		res, err := EngineKill(ctx, apis, engines, 3, 12, 2000, RateLoad("chat", 100), 12*time.Second)
		ok := res.Load.Requests - res.Load.Failed
		probes := len(apis) * (int((res.Window-time.Second)/breakerOpen) + 1)
		t.Logf("%d streams open, %d on the killed engine: %d ended with an error event and no [DONE], %d others ended with [DONE]; "+
			"attempts at the dead engine: %d in the first second after the kill, %d in the %v after (half-open probes allowed: %d); "+
			"non-streaming load %d/%d succeeded (%.3f%%) %v",
			res.Streams, res.OnVictim, res.VictimEnded, res.OthersDone, res.FirstSecond, res.Later,
			(res.Window - time.Second).Round(time.Millisecond), probes,
			ok, res.Load.Requests, 100*float64(ok)/float64(max(1, res.Load.Requests)), res.Load.FirstErrors)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range res.Problems {
			t.Error(p)
		}
		if res.Later > probes {
			t.Errorf("the routers sent the dead engine %d requests later than 1s after the kill (more than %d breaker probes)", res.Later, probes)
		}
		if res.Load.Requests == 0 || float64(res.Load.Failed) > 0.001*float64(res.Load.Requests) {
			t.Errorf("%d of %d requests failed: %v", res.Load.Failed, res.Load.Requests, res.Load.FirstErrors)
		}
	})

	t.Run("02b killed engine restarted", func(t *testing.T) {
		// Default config: the dead engine is probed by the routers' health
		// checks (every recovery_interval, 2 s) and comes back without
		// waiting out [breaker] open (30 s).
		victim := engines[3]
		var admins []string
		for _, r := range c.Routers {
			admins = append(admins, r.Admin)
		}
		addr := strings.TrimPrefix(victim.URL, "http://")
		res, err := EngineRestart(ctx, apis, admins, victim.Name, func() {
			_, victim.Proc = StartSimAt(t, bin, "sim-"+victim.Name+"-restarted", dir, addr, "--speed", "1", "--seed", "4")
		}, RateLoad("chat", 50))
		var worst time.Duration
		for _, d := range res.Back {
			worst = max(worst, d)
		}
		t.Logf("engine %s restarted under 50 req/s: back on every router after %v (per router %v); load %d requests, %d failed %v",
			victim.Name, worst.Round(time.Millisecond), res.Back, res.Load.Requests, res.Load.Failed, res.Load.FirstErrors)
		if err != nil {
			t.Fatal(err)
		}
		if worst > 10*time.Second {
			t.Errorf("the restarted engine took %v to take traffic on every router, want ≤ 10s", worst)
		}
		if res.Load.Failed > 0 {
			t.Errorf("%d of %d requests failed during the restart", res.Load.Failed, res.Load.Requests)
		}
	})

	t.Run("01 leader killed under 100 req/s", func(t *testing.T) {
		res, err := LeaderKillLoad(ctx, c, 200, 100, "e1", RateLoad("chat", 100))
		t.Logf("killed leader %s; new leader %s after %v; writes acked %d, lost %d, duplicated %d, unacked %d, retries %d; "+
			"openai-go requests to survivors at 100/s: %d, failed %d %v",
			res.Killed, res.NewLeader, res.Election.Round(time.Millisecond), res.Acked, res.Lost, res.Duplicated, res.Unacked, res.Retries,
			res.Load.Requests, res.Load.Failed, res.Load.FirstErrors)
		if err != nil {
			t.Fatal(err)
		}
		if res.Election > 3*time.Second {
			t.Errorf("new leader after %v > 3s", res.Election)
		}
		if res.Acked != 200 || res.Lost != 0 || res.Duplicated != 0 || res.Unacked != 0 {
			t.Errorf("writes: %+v", res)
		}
		if res.Load.Requests == 0 || res.Load.Failed != 0 {
			t.Errorf("%d of %d requests failed", res.Load.Failed, res.Load.Requests)
		}
	})

	t.Run("09 no secret in any log", func(t *testing.T) {
		leaks, lines, err := ScanLogs(dir, secrets)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("scanned %d log lines of %d processes for %d secrets: %d hits", lines, len(engines)+len(c.Routers), len(secrets), len(leaks))
		for _, l := range leaks {
			t.Errorf("secret %s in %s line %d", l.Secret, l.File, l.Line)
		}
	})
}

func assertClean(t *testing.T, res FailoverResult) {
	t.Helper()
	if res.VictimAttempts == 0 {
		t.Error("the failing engine was never tried: the scenario proved nothing")
	}
	if res.Clean != res.Requests {
		t.Errorf("unclean answers: %s", strings.Join(res.Problems, "; "))
	}
}

// waitOpen waits until every router's data plane is open (no API key
// needed: open) or closed (401 without a key).
func waitOpen(ctx context.Context, apis []string, open bool) error {
	body := `{"model":"chat","messages":[{"role":"user","content":"ping"}],"max_tokens":2}`
	return testwait.Poll(10*time.Second, 50*time.Millisecond, func() error {
		for _, api := range apis {
			code, _, err := Do(ctx, http.MethodPost, api+"/v1/chat/completions", "", body)
			if err != nil {
				return err
			}
			if (code == http.StatusUnauthorized) == open {
				return fmt.Errorf("%s answers %d without a key", api, code)
			}
		}
		return nil
	})
}
