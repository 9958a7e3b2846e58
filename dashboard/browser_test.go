package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rolter/rolter/internal/testwait"
)

// The browser tests drive headless Chromium through chromedp against the
// embedded dashboard and an in-test admin API. One browser is started for
// the package; every test gets its own tab (so its own sessionStorage).
// Without Chromium they skip, unless CI is set, where they fail.

const testToken = "test-admin-token"

var browser struct {
	once    sync.Once
	ctx     context.Context
	cancel  func()
	dataDir string
	err     error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if browser.cancel != nil {
		browser.cancel()
	}
	if browser.dataDir != "" {
		os.RemoveAll(browser.dataDir)
	}
	os.Exit(code)
}

func chromiumPath() string {
	if p := os.Getenv("ROLTER_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

func startBrowser() (context.Context, error) {
	browser.once.Do(func() {
		path := chromiumPath()
		if path == "" {
			browser.err = errNoChromium
			return
		}
		dir, err := os.MkdirTemp("", "rolter-dashboard-chromium-")
		if err != nil {
			browser.err = err
			return
		}
		browser.dataDir = dir
		opts := []chromedp.ExecAllocatorOption{
			chromedp.ExecPath(path),
			chromedp.Headless,
			chromedp.NoSandbox,
			chromedp.DisableGPU,
			chromedp.NoFirstRun,
			chromedp.NoDefaultBrowserCheck,
			chromedp.UserDataDir(dir),
			chromedp.WindowSize(1440, 900),
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.Flag("disable-extensions", true),
			chromedp.Flag("no-proxy-server", true),
		}
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, cancelBrowser := chromedp.NewContext(actx)
		// Start the browser now so a broken install fails once, clearly.
		// The first run's context owns the browser, so it carries no
		// timeout; the bound is the timer.
		if err2 := boundedFirstRun(bctx, 60*time.Second); err2 != nil {
			cancelBrowser()
			cancelAlloc()
			browser.err = fmt.Errorf("starting %s: %w", path, err2)
			return
		}
		browser.ctx = bctx
		browser.cancel = func() { cancelBrowser(); cancelAlloc() }
	})
	return browser.ctx, browser.err
}

// boundedFirstRun performs the first run on a chromedp context, which
// must use that context itself (a derived one with a timeout would close
// the browser or tab when it ends); the bound is a timer instead.
func boundedFirstRun(ctx context.Context, limit time.Duration) error {
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		return err
	case <-time.After(limit):
		return fmt.Errorf("no answer within %v", limit)
	}
}

var errNoChromium = errors.New("chromium not found (install the Debian package chromium, or set ROLTER_CHROMIUM)")

// page is one browser tab on one fake admin API.
type page struct {
	t    *testing.T
	ctx  context.Context
	base string
	fake *fakeAdmin
}

// newPage starts a fake admin API serving the dashboard and opens a tab.
func newPage(t *testing.T, fake *fakeAdmin) *page {
	t.Helper()
	bctx, err := startBrowser()
	if err != nil {
		if errorsIsNoChromium(err) && os.Getenv("CI") == "" {
			t.Skipf("skipping browser test: %v; CI is unset", err)
		}
		t.Fatalf("browser: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(fake.Handler())
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)

	tctx, cancel := chromedp.NewContext(bctx)
	t.Cleanup(cancel)
	// The first run on a tab's context opens the tab and binds it to that
	// context, so it must not be a short-lived one.
	if err := boundedFirstRun(tctx, 30*time.Second); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	p := &page{t: t, ctx: tctx, base: srv.URL, fake: fake}
	// Registered after cancel, so it runs first: the tab is still open.
	t.Cleanup(func() {
		if t.Failed() {
			p.saveScreenshot(filepath.Join("testdata", "failures", sanitize(t.Name())+".png"))
		}
	})
	return p
}

func errorsIsNoChromium(err error) bool { return errors.Is(err, errNoChromium) }

func sanitize(name string) string {
	return strings.NewReplacer("/", "_", " ", "_", ":", "_").Replace(name)
}

func (p *page) saveScreenshot(path string) {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Logf("screenshot failed: %v", err)
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		p.t.Logf("screenshot: %v", err)
		return
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		p.t.Logf("screenshot: %v", err)
		return
	}
	abs, _ := filepath.Abs(path)
	p.t.Logf("screenshot saved to %s", abs)
}

// run executes actions with a bound, failing the test on error.
func (p *page) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// evalJS evaluates a JavaScript expression in the tab and decodes its value.
func evalJS[T any](p *page, js string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 15*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		p.t.Fatalf("evaluate %.60s: %v", js, err)
	}
	return v
}

// text returns the innerText of the first element matching sel ("" if none).
func (p *page) text(sel string) string {
	p.t.Helper()
	return evalJS[string](p, fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.innerText : ""; })()`, sel))
}

// eventually waits up to 10 s for cond; what describes the awaited
// state, read only on failure.
func (p *page) eventually(what func() string, cond func() bool) {
	p.t.Helper()
	testwait.For(p.t, 10*time.Second, "the page", func() error {
		if cond() {
			return nil
		}
		return errors.New(what())
	})
}

// waitText waits until the element matching sel contains want.
func (p *page) waitText(sel, want string) string {
	p.t.Helper()
	var got string
	p.eventually(func() string { return fmt.Sprintf("%s to contain %q (last: %q)", sel, want, got) }, func() bool {
		got = p.text(sel)
		return strings.Contains(got, want)
	})
	return got
}

// open loads the dashboard at hash (e.g. "#/mesh") with a fast refresh.
func (p *page) open(hash string) {
	p.t.Helper()
	p.run("navigate", chromedp.Navigate(p.base+"/ui/?refresh_ms=200"+hash))
}

// signIn opens the dashboard and signs in with the fake's token.
func (p *page) signIn(hash string) {
	p.t.Helper()
	p.open(hash)
	p.run("sign in",
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), p.fake.token),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#main")))
}

// setValue replaces an input's value as if typed and fires input/change.
func (p *page) setValue(sel, value string) {
	p.t.Helper()
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false;
		e.focus(); e.value = %q; e.dispatchEvent(new Event('input', {bubbles: true}));
		e.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, sel, value)
	if !evalJS[bool](p, js) {
		p.t.Fatalf("no element %s", sel)
	}
}

func (p *page) value(sel string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 15*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Value(chromedp.CSS(sel)))
	if err != nil {
		p.t.Fatalf("value of %s: %v", sel, err)
	}
	return v
}

// lock runs f with the fake's state locked.
func (p *page) lock(f func(*fakeAdmin)) {
	p.fake.mu.Lock()
	defer p.fake.mu.Unlock()
	f(p.fake)
}
