package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Client is the GitOps side of /api/v1/config/*: `rolter config diff`
// and `rolter config apply` run it against any router's admin address.
type Client struct {
	// Admin is the router's admin base URL (http://host:port).
	Admin string
	// Token is an admin (or superadmin) bearer token.
	Token string
	// HTTP is the client to use (nil: http.DefaultClient).
	HTTP *http.Client
}

// ErrAPI wraps every error answer of the admin API; its message is the
// OpenAI-shaped error's.
var ErrAPI = errors.New("admin API")

// APIError is an error answer of the admin API.
type APIError struct {
	Status  int
	Type    string
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("admin API: %d %s: %s", e.Status, e.Code, e.Message)
}

// Unwrap makes errors.Is(err, ErrAPI) hold.
func (e *APIError) Unwrap() error { return ErrAPI }

// Diff asks what syncing file (a rolter.toml) would change.
func (c *Client) Diff(ctx context.Context, file []byte) (ConfigReport, error) {
	return c.post(ctx, "/api/v1/config/diff", file)
}

// Apply syncs file into the cluster and returns the new config_version.
// A file the generation rule refuses is an *APIError with Code
// "file_refused".
func (c *Client) Apply(ctx context.Context, file []byte) (ConfigReport, error) {
	return c.post(ctx, "/api/v1/config/apply", file)
}

func (c *Client) post(ctx context.Context, path string, body []byte) (ConfigReport, error) {
	var out ConfigReport
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.Admin, "/")+path, bytes.NewReader(body))
	if err != nil {
		return out, err
	}
	req.Header.Set("Content-Type", "application/toml")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return out, err
	}
	if resp.StatusCode != http.StatusOK {
		var e apiError
		if json.Unmarshal(b, &e) != nil || e.Error.Message == "" {
			return out, &APIError{Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
		}
		return out, &APIError{Status: resp.StatusCode, Type: e.Error.Type, Code: e.Error.Code, Message: e.Error.Message}
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("%w: undecodable answer: %v", ErrAPI, err)
	}
	return out, nil
}

// WriteText prints r for a terminal or a CI log: the two revisions, the
// outcome and one line per change.
func (r ConfigReport) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "cluster: %s\nfile:    %s\n", revisionText(r.From.Generation, r.From.SHA256), revisionText(r.To.Generation, r.To.SHA256))
	switch r.Outcome {
	case OutcomeWouldApply:
		fmt.Fprintf(&b, "%d change(s) would be applied:\n", len(r.Changes))
	case "applied":
		fmt.Fprintf(&b, "applied %d change(s); config_version %d\n", len(r.Changes), r.ConfigVersion)
	case "unchanged":
		fmt.Fprintf(&b, "no change: the cluster runs this file; config_version %d\n", r.ConfigVersion)
	case "refused":
		fmt.Fprintf(&b, "refused: %s\n", r.Message)
		if len(r.Changes) > 0 {
			fmt.Fprintf(&b, "the file differs from the cluster in %d place(s):\n", len(r.Changes))
		}
	}
	for _, c := range r.Changes {
		fmt.Fprintf(&b, "  %s\n", c)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func revisionText(gen uint64, sum string) string {
	if sum == "" {
		return fmt.Sprintf("generation %d (no file synced yet)", gen)
	}
	return fmt.Sprintf("generation %d, sha256 %.12s", gen, sum)
}
