package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigCommand checks what a GitOps pipeline sees of `rolter config`:
// usage errors exit 2, a diff the cluster would refuse exits 1 after
// printing why, and the file and token reach the admin API.
func TestConfigCommand(t *testing.T) {
	var gotAuth, gotBody, gotPath string
	answer := `{"from":{"generation":3,"sha256":"abc"},"to":{"generation":2,"sha256":"def"},"changes":["~ provider/a api_base: x → y"],` +
		`"outcome":"refused","message":"rolter.toml not applied: its generation is older than the cluster's","config_version":9}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotAuth, gotBody, gotPath = r.Header.Get("Authorization"), string(b), r.URL.Path
		_, _ = io.WriteString(w, answer)
	}))
	defer srv.Close()
	dir := t.TempDir()
	file, token := filepath.Join(dir, "rolter.toml"), filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("generation = 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(token, []byte("tok-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ROLTER_ADMIN_TOKEN", "")

	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"no verb", []string{"config"}, 2, ""},
		{"unknown verb", []string{"config", "push"}, 2, ""},
		{"no token", []string{"config", "diff", "--admin", srv.URL, "--config", file}, 2, ""},
		{"refused diff", []string{"config", "diff", "--admin", srv.URL, "--token-file", token, "--config", file}, 1,
			"refused: rolter.toml not applied: its generation is older"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), tc.args, &stdout, &stderr); code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.out) {
				t.Fatalf("stdout %q lacks %q", stdout.String(), tc.out)
			}
		})
	}
	if gotPath != "/api/v1/config/diff" || gotAuth != "Bearer tok-123" || gotBody != "generation = 2\n" {
		t.Fatalf("the admin API got %s, %q, %q", gotPath, gotAuth, gotBody)
	}
}
