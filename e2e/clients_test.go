package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
)

// NewOpenAI returns the official client pointed at a router's API base
// URL (http://host:port), with its own retries off so every failure the
// router lets through is counted. key may be empty (an open data plane).
func NewOpenAI(api, key string) openai.Client {
	if key == "" {
		key = "unused"
	}
	return openai.NewClient(option.WithBaseURL(api+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}))
}

// ChatOnce sends one non-streaming chat request for model through c.
func ChatOnce(ctx context.Context, c openai.Client, model string, maxTokens int64, opts ...option.RequestOption) (*openai.ChatCompletion, error) {
	return c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("ping")},
		MaxTokens: openai.Int(maxTokens),
	}, opts...)
}

// LoadFunc drives client load at targets until ctx ends.
type LoadFunc func(ctx context.Context, targets []string) LoadResult

// RateLoad returns a LoadFunc sending rate non-streaming chat requests per
// second for model with the openai-go client, round-robin over targets,
// each bounded by 10 s, at most 256 in flight.
func RateLoad(model string, rate int) LoadFunc {
	return func(ctx context.Context, targets []string) LoadResult {
		clients := make([]openai.Client, len(targets))
		for i, t := range targets {
			clients[i] = NewOpenAI(t, "")
		}
		var mu sync.Mutex
		var res LoadResult
		var wg sync.WaitGroup
		sem := make(chan struct{}, 256)
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				wg.Wait()
				return res
			case <-tick.C:
			}
			select {
			case sem <- struct{}{}:
			default:
				mu.Lock()
				res.Requests++
				res.Failed++
				mu.Unlock()
				continue
			}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer cancel()
				_, err := ChatOnce(rctx, clients[i%len(clients)], model, 4)
				mu.Lock()
				defer mu.Unlock()
				res.Requests++
				if err != nil {
					res.Failed++
					if len(res.FirstErrors) < 5 {
						res.FirstErrors = append(res.FirstErrors, fmt.Sprintf("%s: %v", targets[i%len(targets)], err))
					}
				}
			}()
		}
	}
}

// Stream is what a raw SSE client saw of one streaming chat request.
type Stream struct {
	Status  int
	Events  []string // data payloads in order, [DONE] included
	Done    bool     // ended with data: [DONE]
	ErrorEv bool     // carried a data: {"error":...} event
	Roles   int      // chunks whose delta names a role (the preamble)
	IDs     map[string]bool
	Tokens  int // content chunks
	Err     error
	first   chan struct{}
	once    sync.Once
}

// StartStream opens a streaming chat request with id in HeaderRequestID
// and reads it on a goroutine; the returned channel closes when the stream
// ends. First is closed when the first content chunk arrives.
func StartStream(ctx context.Context, api, key, model, id string, maxTokens int) (*Stream, <-chan struct{}) {
	s := &Stream{IDs: map[string]bool{}, first: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer s.once.Do(func() { close(s.first) })
		s.read(ctx, api, key, model, id, maxTokens)
	}()
	return s, done
}

// First is closed once the first content token arrived (or the stream
// ended).
func (s *Stream) First() <-chan struct{} { return s.first }

func (s *Stream) read(ctx context.Context, api, key, model, id string, maxTokens int) {
	body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"tell me a long story"}]}`, model, maxTokens)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		s.Err = err
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderRequestID, id)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		s.Err = err
		return
	}
	defer resp.Body.Close()
	s.Status = resp.StatusCode
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		s.Events = append(s.Events, data)
		if data == "[DONE]" {
			s.Done = true
			continue
		}
		var ev struct {
			ID      string          `json:"id"`
			Error   json.RawMessage `json:"error"`
			Choices []struct {
				Delta struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &ev) != nil {
			continue
		}
		if len(ev.Error) > 0 {
			s.ErrorEv = true
		}
		if ev.ID != "" {
			s.IDs[ev.ID] = true
		}
		for _, c := range ev.Choices {
			if c.Delta.Role != "" {
				s.Roles++
			}
			if c.Delta.Content != "" {
				s.Tokens++
				s.once.Do(func() { close(s.first) })
			}
		}
	}
	s.Err = sc.Err()
}

// Counter counts outcomes from many goroutines.
type Counter struct{ ok, failed atomic.Int64 }

// Add counts one outcome.
func (c *Counter) Add(ok bool) {
	if ok {
		c.ok.Add(1)
	} else {
		c.failed.Add(1)
	}
}

// Counts returns the successes and failures so far.
func (c *Counter) Counts() (ok, failed int64) { return c.ok.Load(), c.failed.Load() }
