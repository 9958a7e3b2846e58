package overhead

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, url string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// The canned engine answers both modes as the sim does (a completion with
// usage; a stream of max_tokens events and [DONE]) and never decodes the
// request: a body it could not parse is answered the same way.
func TestCannedEngineAnswersWithoutDecoding(t *testing.T) {
	cfg := Config{PromptWords: 16, MaxTokens: 5, Engine: EngineCanned}
	addrs, err := startEngine(t.Context(), cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addrs[1]
	code, b := post(t, base+"/v1/chat/completions", benchRequest(cfg, false).body)
	var plain struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &plain); code != http.StatusOK || err != nil || len(plain.Choices) != 1 || plain.Usage.CompletionTokens != 5 {
		t.Fatalf("plain: %d %v %s", code, err, b)
	}
	code, b = post(t, base+"/v1/chat/completions", []byte(`not json at all, "stream":true}`))
	events := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
	if code != http.StatusOK || len(events) != 6 || events[5] != "data: [DONE]" {
		t.Fatalf("stream: %d, %d events: %q", code, len(events), b)
	}
	// Everything else is the sim's own.
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/models: %d", resp.StatusCode)
	}
}

func TestReadTailFindsTheStreamFlagAcrossReads(t *testing.T) {
	long := append(bytes.Repeat([]byte("1,"), 50000), []byte(`2],"stream":true}`)...)
	for _, tc := range []struct {
		body io.Reader
		want bool
	}{
		{bytes.NewReader(long), true},
		{io.LimitReader(bytes.NewReader(long), int64(len(long)-1)), false},
		{&oneByte{b: []byte(`{"stream":true}`)}, true},
		{strings.NewReader(`{"stream":false}`), false},
		{strings.NewReader(``), false},
	} {
		if got, err := readTail(tc.body); err != nil || got != tc.want {
			t.Errorf("stream %v, %v; want %v", got, err, tc.want)
		}
	}
}

type oneByte struct{ b []byte }

func (o *oneByte) Read(p []byte) (int, error) {
	if len(o.b) == 0 {
		return 0, io.EOF
	}
	p[0] = o.b[0]
	o.b = o.b[1:]
	return 1, nil
}

// The open-streams mode keeps its clients' streams open and counts the
// ones that end in the measured part.
func TestStreamsOnceDirect(t *testing.T) {
	cfg := Config{PromptWords: 8, MaxTokens: 1, Engine: EngineCanned, Streams: 8, StreamTokens: 4,
		StreamGap: 5 * time.Millisecond, StreamRounds: 1, StreamDuration: 400 * time.Millisecond}
	addrs, err := startEngine(t.Context(), cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := streamsOnce(t.Context(), cfg, directColumn(addrs))
	if r.stats.errors != 0 || r.stats.sent == 0 || r.perSec <= 0 || r.openAvg <= 0 {
		t.Fatalf("%+v", r)
	}
	// Each stream stays open for its 4 events' gaps at least.
	if r.stats.p50 < 15*time.Millisecond {
		t.Errorf("stream p50 %v, shorter than its events' pacing", r.stats.p50)
	}
}
