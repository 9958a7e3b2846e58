package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
)

// openaiEngine mimics an OpenAI-compatible engine closely enough for the
// official client: JSON completions and SSE chunks with an optional usage
// chunk when stream_options.include_usage is set.
func openaiEngine(w http.ResponseWriter, _ *http.Request, body map[string]any) {
	model := body["model"]
	if body["stream"] != true {
		okChat(w, nil, body)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, piece := range []string{"Hel", "lo", "!"} {
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", model, piece)
		w.(http.Flusher).Flush()
	}
	fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n", model)
	if so, _ := body["stream_options"].(map[string]any); so["include_usage"] == true {
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3,\"total_tokens\":8}}\n\n", model)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func TestOfficialOpenAIClient(t *testing.T) {
	eng := newEngine(t, openaiEngine)
	h := newHarness(t, providers("a", eng.URL)+`
[[routes]]
model = "llama"
targets = [{provider = "a", model = "meta/llama-8b"}]
[[keys]]
name = "k"
sha256 = "`+sha("sk-test")+`"
`, nil)
	client := openai.NewClient(option.WithBaseURL(h.api.URL+"/v1/"), option.WithAPIKey("sk-test"),
		option.WithMaxRetries(0), option.WithHTTPClient(h.api.Client()))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:    "llama",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("say hello")},
	}

	t.Run("non-streaming", func(t *testing.T) {
		c, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) != 1 || c.Choices[0].Message.Content != "hi" {
			t.Fatalf("choices %+v", c.Choices)
		}
		if c.Usage.PromptTokens != 3 || c.Usage.CompletionTokens != 1 || c.Usage.TotalTokens != 4 {
			t.Fatalf("usage %+v", c.Usage)
		}
		if eng.lastBody()["model"] != "meta/llama-8b" {
			t.Fatalf("upstream got model %v", eng.lastBody()["model"])
		}
	})

	t.Run("streaming with usage", func(t *testing.T) {
		p := params
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := client.Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			chunks++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks != 5 || len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "Hello!" {
			t.Fatalf("%d chunks, accumulated %+v", chunks, acc.Choices)
		}
		if acc.Usage.PromptTokens != 5 || acc.Usage.CompletionTokens != 3 || acc.Usage.TotalTokens != 8 {
			t.Fatalf("usage %+v", acc.Usage)
		}
	})

	t.Run("errors reach the client in the OpenAI shape", func(t *testing.T) {
		p := params
		p.Model = "missing"
		_, err := client.Chat.Completions.New(ctx, p)
		var apiErr *openai.Error
		if !asError(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
			t.Fatalf("err %v", err)
		}
	})
}

func asError(err error, target **openai.Error) bool { return errors.As(err, target) }
