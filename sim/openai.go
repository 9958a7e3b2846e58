package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/rolter/rolter/sim/tokenizer"
)

// Request-shape errors (mapped to 400 at the edge).
var (
	errBadRequest   = errors.New("invalid request")
	errUnknownModel = errors.New("model not found")
)

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// completionRequest covers /v1/completions and /v1/chat/completions.
type completionRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []chatMessage   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	// vLLM's chat template switches: add_generation_prompt (default
	// true) and continue_final_message, which continues the final
	// (assistant) message instead of answering it.
	AddGenerationPrompt  *bool `json:"add_generation_prompt"`
	ContinueFinalMessage bool  `json:"continue_final_message"`
}

// template returns the chat template switches the request asks for;
// like vLLM it refuses both continue_final_message and an explicit
// add_generation_prompt.
func (r *completionRequest) template() (tokenizer.Template, error) {
	add := r.AddGenerationPrompt == nil || *r.AddGenerationPrompt
	if r.ContinueFinalMessage && r.AddGenerationPrompt != nil && *r.AddGenerationPrompt {
		return tokenizer.Template{}, fmt.Errorf("%w: Cannot set both `continue_final_message` and `add_generation_prompt` to True", errBadRequest)
	}
	return tokenizer.Template{GenerationPrompt: add && !r.ContinueFinalMessage, ContinueFinal: r.ContinueFinalMessage}, nil
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// text returns a message's content: a string or an array of text parts.
func (m chatMessage) text() (string, error) {
	if len(m.Content) == 0 || string(m.Content) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", fmt.Errorf("%w: message content must be a string or text parts", errBadRequest)
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" || p.Type == "" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// promptTokens returns the token ids of a completions prompt: a string, an
// array of token ids, or a one-element array of either.
func promptTokens(raw json.RawMessage) ([]uint32, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return tokenizer.Encode(nil, s), nil
	}
	var ids []uint32
	if err := json.Unmarshal(raw, &ids); err == nil {
		return ids, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil && len(strs) == 1 {
		return tokenizer.Encode(nil, strs[0]), nil
	}
	var nested [][]uint32
	if err := json.Unmarshal(raw, &nested); err == nil && len(nested) == 1 {
		return nested[0], nil
	}
	return nil, fmt.Errorf("%w: prompt must be a string or an array of token ids", errBadRequest)
}

// chatTokens renders messages through the chat template and tokenizes.
func chatTokens(msgs []chatMessage, tpl tokenizer.Template) ([]uint32, error) {
	if len(msgs) == 0 {
		return nil, fmt.Errorf("%w: messages is empty", errBadRequest)
	}
	tm := make([]tokenizer.Message, len(msgs))
	for i, m := range msgs {
		t, err := m.text()
		if err != nil {
			return nil, err
		}
		tm[i] = tokenizer.Message{Role: m.Role, Content: t}
	}
	return tokenizer.Encode(nil, tokenizer.RenderWith(tm, tpl)), nil
}

type usage struct {
	PromptTokens        int            `json:"prompt_tokens"`
	CompletionTokens    int            `json:"completion_tokens"`
	TotalTokens         int            `json:"total_tokens"`
	PromptTokensDetails *promptDetails `json:"prompt_tokens_details,omitempty"`
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// apiError is the OpenAI error body.
type apiError struct {
	Error apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apiError{Error: apiErrorBody{Message: msg, Type: typ, Code: status}})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
