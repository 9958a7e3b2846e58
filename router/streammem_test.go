package router

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// A stream that cannot be retried or resumed any more holds nothing of
// its request: a thousand open streams of long prompts must not keep a
// thousand prompts.
func TestAnOpenStreamLetsGoOfItsPromptAfterTheFirstByte(t *testing.T) {
	const streams, promptBytes = 16, 1 << 20
	release := make(chan struct{})
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(eng.Close)
	h := newHarness(t, providers("a", eng.URL)+`
[[routes]]
model = "m"
targets = [{provider = "a"}]
`, nil)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` +
		strings.Repeat("word ", promptBytes/5) + `"}]}`

	var before runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	var firsts, ends sync.WaitGroup
	errs := make(chan error, streams)
	for range streams {
		firsts.Add(1)
		ends.Add(1)
		go func() {
			defer ends.Done()
			resp, err := h.api.Client().Post(h.api.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				errs <- err
				firsts.Done()
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			line, err := br.ReadString('\n')
			firsts.Done()
			if err != nil || !strings.Contains(line, `"content":"a"`) {
				errs <- err
				return
			}
			rest, _ := io.ReadAll(br)
			if !strings.Contains(string(rest), "[DONE]") {
				errs <- io.ErrUnexpectedEOF
			}
		}()
	}
	firsts.Wait()
	var open runtime.MemStats
	// Two cycles: a body buffer handed back to its pool is freed on the
	// second (sync.Pool), unless a request takes it again.
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&open)
	close(release)
	ends.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a stream failed: %v", err)
	}
	held := int64(open.HeapAlloc) - int64(before.HeapAlloc)
	if held > streams*promptBytes/4 {
		t.Fatalf("%d open streams of %d-byte prompts hold %d bytes of heap after their first event (the prompts are %d)",
			streams, promptBytes, held, streams*promptBytes)
	}
}
