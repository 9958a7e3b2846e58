package dashboard

import (
	"flag"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

var screenshotDir = flag.String("screenshots", "", "save a PNG of each dashboard screen into this directory (e.g. ../docs/screenshots)")

// TestScreenshots renders every screen but the Mesh against the fake admin
// API and saves it; TestMeshAgainstRealGossip saves the Mesh from a real
// gossip pool. All of them:
//
//	go test ./dashboard -run 'TestScreenshots|TestMeshAgainstRealGossip' -screenshots=../docs/screenshots
func TestScreenshots(t *testing.T) {
	if *screenshotDir == "" {
		t.Skip("pass -screenshots=DIR to save a PNG of each screen")
	}
	fake := newFakeAdmin(testToken)
	fake.policy.Enabled = true
	fake.telemetry = sampleTelemetry(time.Now(), fake.policy)
	p := newPage(t, fake)
	shot := func(name string) {
		t.Helper()
		time.Sleep(300 * time.Millisecond) // let the last refresh paint
		p.saveScreenshot(filepath.Join(*screenshotDir, name+".png"))
	}

	p.open("#/mesh")
	p.run("sign-in screen", chromedp.WaitVisible(chromedp.CSS("#token")))
	shot("00-sign-in")

	// 01-mesh comes from real gossip: TestMeshAgainstRealGossip.
	p.signIn("#/routes")
	p.waitText(`section.editor[data-key="chat-adaptive"]`, "chat-adaptive")
	p.setValue(`section.editor[data-key="qwen-7b"] input.weight`, "4")
	shot("02-routes")

	p.run("telemetry", chromedp.Navigate(p.base+"/ui/#/adaptive/telemetry"))
	p.waitText(`[data-model="chat-adaptive"]`, "router-1")
	shot("03-adaptive-telemetry")

	p.run("settings", chromedp.Navigate(p.base+"/ui/#/adaptive/settings"))
	p.waitText("#affected-routes", "chat-adaptive")
	p.setValue("#exploration_pct", "60")
	p.run("save", chromedp.Click(chromedp.CSS("#save-policy")))
	p.waitText("#policy-error", "exploration_ratio")
	shot("04-adaptive-settings-invalid")
	p.run("reset", chromedp.Click(chromedp.CSS("#reset-policy")))
	p.run("flip", chromedp.Click(chromedp.CSS("label.switch")))
	shot("05-adaptive-settings-kill-switch")

	for _, tc := range []struct {
		name    string
		enabled bool
		sel     string
	}{{"06-telemetry-empty-kill-switch-off", false, "#empty-kill-switch"}, {"07-telemetry-empty-nothing-reporting", true, "#empty-no-reports"}} {
		p.lock(func(f *fakeAdmin) { f.telemetry = nil; f.policy.Enabled = tc.enabled })
		p.run("telemetry", chromedp.Navigate(p.base+"/ui/#/mesh"), chromedp.Navigate(p.base+"/ui/#/adaptive/telemetry"))
		p.waitText(tc.sel, "")
		shot(tc.name)
	}

	p.lock(func(f *fakeAdmin) {
		for i := range 6 {
			f.audited("route.update", fmt.Sprintf("routes/model-%d", i), map[string]any{"weights": []int{i + 1, 1}})
		}
		f.audited("adaptive_routing_policy.update", "adaptive-routing-policy", f.policy)
	})
	p.run("audit", chromedp.Navigate(p.base+"/ui/#/audit"))
	p.waitText("#audit", "adaptive_routing_policy.update")
	shot("08-audit-log")
}
