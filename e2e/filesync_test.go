//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

// fileSyncTOML is the rolter.toml of TestFileSync: the provider "engine"
// at apiBase behind the route "chat", and the served model's catalog
// price priceIn (input) per Mtok, at generation gen.
func fileSyncTOML(gen int, apiBase string, priceIn float64) string {
	return fmt.Sprintf(`generation = %d

[[providers]]
name = "engine"
api_base = %q

[[routes]]
model = "chat"
targets = [{ provider = "engine", model = %q }]

[[models]]
model = %q
price_in_per_mtok = %g
price_out_per_mtok = 0.6

[health]
interval = "1s"
`, gen, apiBase, SimModel, SimModel, priceIn)
}

type auditRow struct {
	Seq           uint64   `json:"seq"`
	Actor         string   `json:"actor"`
	Action        string   `json:"action"`
	Outcome       string   `json:"outcome"`
	ConfigVersion uint64   `json:"config_version"`
	Diff          []string `json:"diff"`
}

func fileSyncAudit(ctx context.Context, c *Cluster, r *Router) ([]auditRow, error) {
	code, b, err := Do(ctx, http.MethodGet, r.Admin+"/api/v1/audit?limit=1000", c.Token, "")
	if err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("audit on %s: %d %s %v", r.ID, code, b, err)
	}
	var page struct {
		Data []auditRow `json:"data"`
	}
	if err := json.Unmarshal(b, &page); err != nil {
		return nil, err
	}
	var out []auditRow
	for _, e := range page.Data {
		if e.Action == "config.file_sync" {
			out = append(out, e)
		}
	}
	return out, nil
}

type providerRow struct {
	Name      string `json:"name"`
	APIBase   string `json:"api_base"`
	ManagedBy string `json:"managed_by"`
}

func providers(ctx context.Context, c *Cluster, r *Router) (map[string]providerRow, error) {
	code, b, err := Do(ctx, http.MethodGet, r.Admin+"/api/v1/providers", c.Token, "")
	if err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("providers on %s: %d %s %v", r.ID, code, b, err)
	}
	var page struct {
		Data []providerRow `json:"data"`
	}
	if err := json.Unmarshal(b, &page); err != nil {
		return nil, err
	}
	out := map[string]providerRow{}
	for _, p := range page.Data {
		out[p.Name] = p
	}
	return out, nil
}

type modelPriceRow struct {
	Model          string  `json:"model"`
	PriceInPerMtok float64 `json:"price_in_per_mtok"`
	ManagedBy      string  `json:"managed_by"`
}

// waitModelPrice waits until every live router's admin API lists the
// served model at priceIn, owned by the file.
func waitModelPrice(ctx context.Context, c *Cluster, priceIn float64) error {
	return testwait.Poll(20*time.Second, 100*time.Millisecond, func() error {
		for _, r := range c.Live() {
			code, b, err := Do(ctx, http.MethodGet, r.Admin+"/api/v1/model-prices/"+SimModel, c.Token, "")
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("model price on %s: %d %s %v", r.ID, code, b, err)
			}
			var m modelPriceRow
			if err := json.Unmarshal(b, &m); err != nil {
				return err
			}
			if m.PriceInPerMtok != priceIn || m.ManagedBy != "file" {
				return fmt.Errorf("%s: %+v, want price_in_per_mtok %g managed by the file", r.ID, m, priceIn)
			}
		}
		return nil
	})
}

// metric returns the value of the series line (name plus labels) in r's
// /metrics; 0 when absent.
func metric(ctx context.Context, r *Router, series string) (float64, error) {
	code, b, err := Do(ctx, http.MethodGet, r.Admin+"/metrics", "", "")
	if err != nil || code != http.StatusOK {
		return 0, fmt.Errorf("metrics on %s: %d %v", r.ID, code, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, nil
}

func syncsSeen(ctx context.Context, r *Router) (float64, error) {
	a, err := metric(ctx, r, `rolter_config_file_sync_total{result="applied"}`)
	if err != nil {
		return 0, err
	}
	u, err := metric(ctx, r, `rolter_config_file_sync_total{result="unchanged"}`)
	return a + u, err
}

// chatReaches checks that a chat request through r succeeds.
func chatReaches(ctx context.Context, r *Router, model string) error {
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"ping"}],"max_tokens":4}`, model)
	code, b, err := Do(ctx, http.MethodPost, r.API+"/v1/chat/completions", "", body)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("%s: %d %.200s", r.ID, code, b)
	}
	return err
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestFileSync is issue 14 item 3 with real processes: three routers
// share one rolter.toml.
//   - an edited api_base reaches the data plane after a restart of one
//     router, and separately after a SIGHUP to all three at once (which
//     makes exactly one change);
//   - each change is audited as config.file_sync with its diff;
//   - a router restarted with an older generation cannot roll back;
//   - entries created through the admin API are untouched, and
//     file-owned ones are refused by the API (409 naming rolter.toml);
//   - `rolter config diff` and `rolter config apply` work against any
//     router with a token file.
func TestFileSync(t *testing.T) {
	bin := BuildRolter(t)
	dir := t.TempDir()
	procs := map[string]*Proc{}
	start := func(name string) string {
		base, p := StartSimArgs(t, bin, name, dir, "--instant")
		procs[base] = p
		return base
	}
	stopSim := func(base string) { procs[base].Kill() }
	simA, simB, simC, simD := start("sim-a"), start("sim-b"), start("sim-c"), start("sim-d")
	c := StartCluster(t, ClusterOptions{Bin: bin, N: 3, Dir: dir, Config: fileSyncTOML(1, simA, 0.2)})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	file := filepath.Join(dir, "rolter.toml")
	r1, r2, r3 := c.Routers[0], c.Routers[1], c.Routers[2]

	// Entries made through the admin API, which no file sync may touch.
	for _, w := range []struct{ path, body string }{
		{"/api/v1/providers", fmt.Sprintf(`{"name":"api-made","api_base":%q}`, simD)},
		{"/api/v1/routes", fmt.Sprintf(`{"model":"api-chat","targets":[{"provider":"api-made","model":%q}]}`, SimModel)},
	} {
		if code, b, err := Do(ctx, http.MethodPost, r2.Admin+w.path, c.Token, w.body); err != nil || code != http.StatusCreated {
			t.Fatalf("POST %s: %d %s %v", w.path, code, b, err)
		}
	}
	// File-owned entries are read-only in the API.
	code, b, err := Do(ctx, http.MethodPut, r3.Admin+"/api/v1/providers/engine", c.Token, fmt.Sprintf(`{"api_base":%q}`, simB))
	if err != nil || code != http.StatusConflict || !strings.Contains(string(b), "managed by rolter.toml") ||
		!strings.Contains(string(b), `"type":"invalid_request_error"`) {
		t.Fatalf("PUT of the file-owned provider: %d %s %v; want 409 naming rolter.toml", code, b, err)
	}
	if code, b, err := Do(ctx, http.MethodDelete, r3.Admin+"/api/v1/routes/chat", c.Token, ""); err != nil || code != http.StatusConflict {
		t.Fatalf("DELETE of the file-owned route: %d %s %v", code, b, err)
	}
	code, b, err = Do(ctx, http.MethodPut, r3.Admin+"/api/v1/model-prices/"+SimModel, c.Token,
		`{"price_in_per_mtok":9,"price_out_per_mtok":9}`)
	if err != nil || code != http.StatusConflict || !strings.Contains(string(b), "managed by rolter.toml") {
		t.Fatalf("PUT of the file-owned model price: %d %s %v; want 409 naming rolter.toml", code, b, err)
	}
	ps, err := providers(ctx, c, r3)
	if err != nil {
		t.Fatal(err)
	}
	if ps["engine"].ManagedBy != "file" || ps["api-made"].ManagedBy != "api" {
		t.Fatalf("managed_by: %+v", ps)
	}

	// 1. Edit api_base, restart one router: every router's requests
	// reach the new address (the old one is gone).
	writeFile(t, file, fileSyncTOML(2, simB, 0.2))
	stopSim(simA)
	c.Restart(t, r1, "")
	if err := waitAPIBase(ctx, c, simB); err != nil {
		t.Fatal(err)
	}
	for _, r := range c.Routers {
		if err := testwait.Poll(20*time.Second, 100*time.Millisecond, func() error { return chatReaches(ctx, r, "chat") }); err != nil {
			t.Fatalf("after the restart: %v", err)
		}
	}
	audits, err := fileSyncAudit(ctx, c, r2)
	if err != nil {
		t.Fatal(err)
	}
	wantDiff := fmt.Sprintf("~ provider/engine api_base: %s → %s", simA, simB)
	if len(audits) != 1 || audits[0].Actor != "file:r1" || audits[0].Outcome != "ok" || len(audits[0].Diff) != 1 || audits[0].Diff[0] != wantDiff {
		t.Fatalf("audit after the restart: %+v; want one config.file_sync by file:r1 with %q", audits, wantDiff)
	}
	t.Logf("restart of r1 with generation 2: audited %q at config_version %d", audits[0].Diff[0], audits[0].ConfigVersion)

	// 2. Edit again (the address and the model's price), SIGHUP all
	// three routers at once: one change.
	before := map[string]float64{}
	for _, r := range c.Routers {
		if before[r.ID], err = syncsSeen(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, file, fileSyncTOML(3, simC, 0.3))
	for _, r := range c.Routers {
		if err := r.Proc.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	err = testwait.Poll(30*time.Second, 100*time.Millisecond, func() error {
		for _, r := range c.Routers {
			n, err := syncsSeen(ctx, r)
			if err != nil {
				return err
			}
			if n != before[r.ID]+1 {
				return fmt.Errorf("%s: %v syncs, want %v", r.ID, n, before[r.ID]+1)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("every router syncs after SIGHUP: %v", err)
	}
	stopSim(simB)
	if err := waitAPIBase(ctx, c, simC); err != nil {
		t.Fatal(err)
	}
	for _, r := range c.Routers {
		if err := testwait.Poll(20*time.Second, 100*time.Millisecond, func() error { return chatReaches(ctx, r, "chat") }); err != nil {
			t.Fatalf("after SIGHUP: %v", err)
		}
	}
	audits, err = fileSyncAudit(ctx, c, r3)
	if err != nil {
		t.Fatal(err)
	}
	ok := 0
	for _, a := range audits {
		if a.Outcome == "ok" {
			ok++
		}
	}
	wantDiff = fmt.Sprintf("~ provider/engine api_base: %s → %s", simB, simC)
	wantPrice := fmt.Sprintf("~ model/%s price_in_per_mtok: 0.2 → 0.3", SimModel)
	if ok != 2 || len(audits[0].Diff) != 2 || audits[0].Diff[0] != wantDiff || audits[0].Diff[1] != wantPrice ||
		audits[0].ConfigVersion != audits[len(audits)-1].ConfigVersion+1 {
		t.Fatalf("audit after SIGHUP to three routers: %+v; want exactly one more config.file_sync, %q and %q, one config_version later",
			audits, wantDiff, wantPrice)
	}
	if err := waitModelPrice(ctx, c, 0.3); err != nil {
		t.Fatalf("the file's new model price after SIGHUP: %v", err)
	}
	t.Logf("SIGHUP to 3 routers with generation 3: 3 syncs, 1 change (%s by %s), config_version %d",
		audits[0].Diff[0], audits[0].Actor, audits[0].ConfigVersion)

	// 3. A router restarted with an older file cannot roll back.
	oldFile := filepath.Join(dir, "rolter-old.toml")
	writeFile(t, oldFile, fileSyncTOML(2, simB, 0.2))
	c.Restart(t, r2, oldFile)
	err = testwait.Poll(20*time.Second, 100*time.Millisecond, func() error {
		v, err := metric(ctx, r2, `rolter_config_file_sync_total{result="refused"}`)
		if err == nil && v != 1 {
			err = fmt.Errorf("refused count %v", v)
		}
		return err
	})
	if err != nil {
		t.Fatalf("the older file is refused: %v\n%s", err, r2.Proc.Tail(2000))
	}
	if v, err := metric(ctx, r2, "rolter_config_file_out_of_sync"); err != nil || v != 1 {
		t.Errorf("rolter_config_file_out_of_sync on r2 = %v %v, want 1", v, err)
	}
	if log, _ := os.ReadFile(r2.Proc.Log); !strings.Contains(string(log), "rolter.toml refused") ||
		!strings.Contains(string(log), "generation 2, the cluster runs generation 3") {
		t.Errorf("r2's log does not say why its file was refused:\n%s", r2.Proc.Tail(2000))
	}
	if err := waitAPIBase(ctx, c, simC); err != nil {
		t.Fatalf("rolled back: %v", err)
	}
	if err := waitModelPrice(ctx, c, 0.3); err != nil {
		t.Fatalf("rolled back the model price: %v", err)
	}
	if err := chatReaches(ctx, r2, "chat"); err != nil {
		t.Fatal(err)
	}
	t.Logf("r2 restarted with generation 2: refused, cluster stays at generation 3")

	// 4. GitOps: diff, then apply through r3's admin API.
	tokenFile := filepath.Join(dir, "admin-token")
	gitops := filepath.Join(dir, "rolter-gitops.toml")
	writeFile(t, gitops, fileSyncTOML(4, simD, 0.3))
	out := runCLI(t, bin, "config", "diff", "--admin", r3.Admin, "--token-file", tokenFile, "--config", gitops)
	wantDiff = fmt.Sprintf("~ provider/engine api_base: %s → %s", simC, simD)
	if !strings.Contains(out, "1 change(s) would be applied") || !strings.Contains(out, wantDiff) {
		t.Fatalf("rolter config diff:\n%s", out)
	}
	if ps, _ := providers(ctx, c, r3); ps["engine"].APIBase != simC {
		t.Fatalf("diff changed the state: %+v", ps)
	}
	out = runCLI(t, bin, "config", "apply", "--admin", strings.TrimPrefix(r3.Admin, "http://"), "--token-file", tokenFile, "--config", gitops)
	if !strings.Contains(out, "applied 1 change(s); config_version ") {
		t.Fatalf("rolter config apply:\n%s", out)
	}
	t.Logf("rolter config apply: %s", strings.TrimSpace(out[strings.Index(out, "applied"):]))
	stopSim(simC)
	if err := waitAPIBase(ctx, c, simD); err != nil {
		t.Fatal(err)
	}
	for _, r := range c.Routers {
		if err := testwait.Poll(20*time.Second, 100*time.Millisecond, func() error { return chatReaches(ctx, r, "chat") }); err != nil {
			t.Fatalf("after config apply: %v", err)
		}
	}

	// The API-created entries survived every sync.
	ps, err = providers(ctx, c, r1)
	if err != nil {
		t.Fatal(err)
	}
	if p := ps["api-made"]; p.APIBase != simD || p.ManagedBy != "api" {
		t.Fatalf("API-created provider after the syncs: %+v", p)
	}
	if err := chatReaches(ctx, r1, "api-chat"); err != nil {
		t.Fatalf("API-created route after the syncs: %v", err)
	}
}

// waitAPIBase waits until every router's admin API shows engine at base.
func waitAPIBase(ctx context.Context, c *Cluster, base string) error {
	return testwait.Poll(20*time.Second, 100*time.Millisecond, func() error {
		for _, r := range c.Live() {
			ps, err := providers(ctx, c, r)
			if err != nil {
				return err
			}
			if got := ps["engine"].APIBase; got != base {
				return fmt.Errorf("%s: engine at %s, want %s", r.ID, got, base)
			}
		}
		return nil
	})
}

func runCLI(t *testing.T, bin Binary, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin.Path, append(append([]string{}, bin.Args...), args...)...)
	cmd.Env = append(os.Environ(), bin.Env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rolter %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
