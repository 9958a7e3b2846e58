package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
)

// ResumedStream is one streamed chat answer as the openai-go client saw
// it.
type ResumedStream struct {
	RequestID string
	Text      string
	IDs       map[string]bool // distinct chunk ids
	Roles     int             // chunks carrying a role
	Finishes  int             // chunks carrying a finish_reason
	Usage     *openai.CompletionUsage
	Err       error
	// Elapsed is the whole stream; MaxGap the longest wait between two
	// content chunks (where a resumed stream pauses).
	Elapsed, MaxGap time.Duration
}

// ResumeRunResult is what ResumeRun saw.
type ResumeRunResult struct {
	Streams []ResumedStream
	// Errors counts streams that ended with a client-visible error.
	Errors      int
	FirstErrors []string
	Elapsed     time.Duration
}

// ResumeRun streams n chat requests for model through the official
// openai-go client at api, workers at a time, each with include_usage,
// maxTokens and its own X-Request-Id (prefix-<i>) so the engines'
// generation logs can be joined to what the client got.
func ResumeRun(ctx context.Context, api, model, prefix string, n, workers int, maxTokens int64) ResumeRunResult {
	c := NewOpenAI(api, "")
	res := ResumeRunResult{Streams: make([]ResumedStream, n)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				s := streamOnce(ctx, c, model, fmt.Sprintf("%s-%d", prefix, i), maxTokens)
				mu.Lock()
				res.Streams[i] = s
				if s.Err != nil {
					res.Errors++
					if len(res.FirstErrors) < 5 {
						res.FirstErrors = append(res.FirstErrors, fmt.Sprintf("%s: %v", s.RequestID, s.Err))
					}
				}
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res
}

func streamOnce(ctx context.Context, c openai.Client, model, id string, maxTokens int64) ResumedStream {
	out := ResumedStream{RequestID: id, IDs: map[string]bool{}}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st := c.Chat.Completions.NewStreaming(rctx, openai.ChatCompletionNewParams{
		Model:         model,
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tell me about " + id)},
		MaxTokens:     openai.Int(maxTokens),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithHeader("X-Request-Id", id))
	defer st.Close()
	var text strings.Builder
	start := time.Now()
	var last time.Time
	for st.Next() {
		ch := st.Current()
		out.IDs[ch.ID] = true
		for _, choice := range ch.Choices {
			if choice.Delta.Role != "" {
				out.Roles++
			}
			if choice.FinishReason != "" {
				out.Finishes++
			}
			if choice.Delta.Content != "" {
				now := time.Now()
				if !last.IsZero() {
					out.MaxGap = max(out.MaxGap, now.Sub(last))
				}
				last = now
			}
			text.WriteString(choice.Delta.Content)
		}
		if ch.JSON.Usage.Valid() && ch.Usage.TotalTokens > 0 {
			u := ch.Usage
			out.Usage = &u
		}
	}
	out.Text = text.String()
	out.Err = st.Err()
	out.Elapsed = time.Since(start)
	return out
}

// Generation is one line of `rolter sim --generation-log`: what the
// engine generated for one request, as the resume checks read it.
type Generation struct {
	RequestID     string `json:"request_id"`
	ID            string `json:"id"`
	Continued     bool   `json:"continued"`
	ContinuedText string `json:"continued_text,omitempty"`
	PromptTokens  int    `json:"prompt_tokens"`
	Text          string `json:"text"`
	Tokens        int    `json:"tokens"`
	Outcome       string `json:"outcome"`
}

// ReadGenerations reads sim generation logs (--generation-log) and groups
// their lines by request id, in the order each engine finished them.
func ReadGenerations(paths ...string) (map[string][]Generation, error) {
	out := map[string][]Generation{}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		err = parseGenerations(f, out)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	return out, nil
}

func parseGenerations(r io.Reader, into map[string][]Generation) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var g Generation
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			return err
		}
		into[g.RequestID] = append(into[g.RequestID], g)
	}
	return sc.Err()
}

// SpliceCheck is what CheckSplices found.
type SpliceCheck struct {
	// Whole streams came from one engine; Resumed were continued on a
	// second one after the first died.
	Whole, Resumed int
	// Durations and longest pauses between content chunks, by kind.
	WholeElapsed, ResumedElapsed, WholeGap, ResumedGap []time.Duration
	Problems                                           []string
}

// CheckSplices compares every clean stream with what the engines logged
// generating it: the client's text must be the dying engine's text
// followed by the continuing engine's (or one engine's whole text), the
// continuation must have asked to continue exactly the dying engine's
// text as the final message, with a prompt that grew by exactly the
// tokens carried over, and usage must
// count the original prompt and every generated token once.
func CheckSplices(streams []ResumedStream, gens map[string][]Generation, maxTokens int) SpliceCheck {
	var c SpliceCheck
	bad := func(s ResumedStream, f string, args ...any) {
		if len(c.Problems) < 10 {
			c.Problems = append(c.Problems, s.RequestID+": "+fmt.Sprintf(f, args...))
		}
	}
	for _, s := range streams {
		if s.Err != nil {
			continue
		}
		lines := append([]Generation(nil), gens[s.RequestID]...)
		// A continuation is logged when it ends, after the death it
		// follows; order by that, not by which log was read first.
		sort.SliceStable(lines, func(i, j int) bool { return !lines[i].Continued && lines[j].Continued })
		if len(s.IDs) != 1 || s.Roles != 1 || s.Finishes != 1 {
			bad(s, "%d chunk ids, %d role chunks, %d finish reasons; want one each", len(s.IDs), s.Roles, s.Finishes)
		}
		var want strings.Builder
		tokens := 0
		for _, g := range lines {
			want.WriteString(g.Text)
			tokens += g.Tokens
		}
		switch {
		case len(lines) == 1 && lines[0].Outcome == "done" && !lines[0].Continued:
			c.Whole++
			c.WholeElapsed, c.WholeGap = append(c.WholeElapsed, s.Elapsed), append(c.WholeGap, s.MaxGap)
		case len(lines) == 2 && lines[0].Outcome == "died" && lines[1].Outcome == "done" && lines[1].Continued:
			c.Resumed++
			c.ResumedElapsed, c.ResumedGap = append(c.ResumedElapsed, s.Elapsed), append(c.ResumedGap, s.MaxGap)
			if lines[1].ContinuedText != lines[0].Text {
				bad(s, "the continuation was asked to continue %q, the dying engine sent %q", lines[1].ContinuedText, lines[0].Text)
			}
			if lines[1].PromptTokens != lines[0].PromptTokens+lines[0].Tokens {
				bad(s, "continuation prompt %d tokens, want %d + %d carried", lines[1].PromptTokens, lines[0].PromptTokens, lines[0].Tokens)
			}
		default:
			bad(s, "engines logged %+v", lines)
			continue
		}
		if s.Text != want.String() {
			bad(s, "client text %q, engines produced %q", s.Text, want.String())
		}
		switch {
		case s.Usage == nil:
			bad(s, "no usage")
		case int(s.Usage.PromptTokens) != lines[0].PromptTokens || int(s.Usage.CompletionTokens) != tokens || tokens != maxTokens:
			bad(s, "usage %d prompt + %d completion, engines: %d prompt, %d generated of max %d",
				s.Usage.PromptTokens, s.Usage.CompletionTokens, lines[0].PromptTokens, tokens, maxTokens)
		}
	}
	return c
}

// MetricSample returns the value of one series (name and labels exactly
// as the Prometheus page writes them, e.g. `x_total{model="m"}`) on
// base+"/metrics"; 0 when absent.
func MetricSample(ctx context.Context, base, series string) (float64, error) {
	code, body, err := Do(ctx, http.MethodGet, base+"/metrics", "", "")
	if err != nil || code != http.StatusOK {
		return 0, fmt.Errorf("GET %s/metrics: %d %v", base, code, err)
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, nil
}

// Quantile returns the q-quantile (0..1, nearest rank) of ds; 0 when empty.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
