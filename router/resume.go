package router

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Resuming a broken stream (docs/streaming.md). On a route with
// resume_streams, a chat or text completion stream whose engine breaks
// after the first byte is continued on another target: the request is
// sent again with the text relayed so far as the start of the answer
// (vLLM's continue_final_message for chat), and the continuation is
// spliced into the client's stream (splice.go). Requests that cannot be
// continued faithfully end as without resume: a terminal SSE error event
// and no [DONE].

// newSplice returns the splice for the attempt when its pool resumes
// streams and the request is a streamed chat or text completion; nil
// otherwise.
func (a *attempt) newSplice() *splice {
	if !a.res.pool.resume || !a.req.stream || a.r.method() != http.MethodPost {
		return nil
	}
	switch a.r.path() {
	case "/v1/chat/completions":
		return newSplice(true, a.req.body)
	case "/v1/completions":
		return newSplice(false, a.req.body)
	}
	return nil
}

// resume is called when the stream relayed from failed broke after the
// first byte. It continues the stream on other targets, at most
// [retry] max_resumes times per request, each attempt spending from the
// retry budget, and returns the status the client got. When the request
// cannot be continued it ends the stream with the terminal error event.
func (a *attempt) resume(deadline time.Time, failed *target, status int) int {
	sp := a.sp
	cfg := a.sn.cfg
	model := a.res.pool.key
	fail := func(outcome, why string) int {
		a.s.metrics.resumes.WithLabelValues(model, outcome).Inc()
		a.s.log.Warn("stream not resumed", "model", a.req.model, "from", failed.provider.name, "outcome", outcome,
			"reason", why, "tokens_carried", sp.tokens)
		a.endStream("upstream stream failed: " + sp.broke)
		return status
	}
	if sp.resumes >= cfg.Retry.MaxResumes {
		return fail("failed", "max_resumes reached")
	}
	body, why := continuation(sp)
	if why != "" {
		return fail("not_resumable", why)
	}
	cont, err := parseRequest(body)
	if err != nil {
		return fail("not_resumable", err.Error())
	}
	a.reqv = cont
	a.req = &a.reqv
	sp.resumes++
	sp.from = failed.provider.name
	for n := 0; n <= cfg.Retry.Attempts; n++ {
		if a.r.Context().Err() != nil {
			return statusClientClosed
		}
		if !time.Now().Before(deadline) {
			return fail("failed", "request timed out")
		}
		if !a.anyEligible() {
			return fail("failed", "no other eligible target")
		}
		if !a.s.budget.Load().spend() {
			return fail("failed", "retry budget exhausted")
		}
		idx, ok := a.pick(true) // a continuation is not a new request: rotations stay
		if !ok {
			return fail("failed", "no other eligible target")
		}
		sp.to = a.res.pool.targets[idx].provider.name
		resp, st, done := a.try(deadline, idx)
		if done {
			return st
		}
		if resp != nil {
			resp.close()
		}
		sp.broke = "continuation failed: " + errString(a.lastErr)
	}
	return fail("failed", "every continuation attempt failed")
}

func errString(err error) string {
	if err == nil {
		return "no answer"
	}
	return err.Error()
}

// endStream writes the terminal error event of a stream that cannot go on.
func (a *attempt) endStream(msg string) {
	_, _ = a.w.Write(sseError(msg))
	_ = a.w.flush()
}

// continuation returns the body that asks another engine to continue the
// answer sp holds, or why the request cannot be continued faithfully.
func continuation(sp *splice) (body []byte, whyNot string) {
	var req map[string]json.RawMessage
	if err := json.Unmarshal(sp.orig, &req); err != nil {
		return nil, "request body is not a JSON object"
	}
	if why := notResumable(req, sp); why != "" {
		return nil, why
	}
	partial := sp.text.String()
	if partial == "" {
		return sp.orig, "" // nothing relayed but the preamble: ask again
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		v, ok := req[k]
		if !ok || isNull(v) {
			continue
		}
		var n int
		if json.Unmarshal(v, &n) != nil {
			return nil, k + " is not an integer"
		}
		if n-sp.tokens < 1 {
			return nil, k + " reached"
		}
		req[k] = json.RawMessage(strconv.Itoa(n - sp.tokens))
	}
	if sp.chat {
		if why := continueChat(req, partial); why != "" {
			return nil, why
		}
	} else if why := continuePrompt(req, partial, sp); why != "" {
		return nil, why
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err.Error()
	}
	return b, ""
}

// notResumable names what makes a request impossible to continue on
// another engine without the client noticing ("" when nothing does).
func notResumable(req map[string]json.RawMessage, sp *splice) string {
	intAbove := func(k string, limit int) bool {
		var n int
		v, ok := req[k]
		return ok && !isNull(v) && (json.Unmarshal(v, &n) != nil || n > limit)
	}
	set := func(k string) bool { v, ok := req[k]; return ok && !isNull(v) && string(v) != "false" }
	switch {
	case intAbove("n", 1):
		return "n > 1"
	case intAbove("best_of", 1):
		return "best_of > 1"
	case set("logprobs"), intAbove("top_logprobs", 0), set("prompt_logprobs"):
		return "logprobs asked"
	case set("echo"):
		return "echo asked"
	case sp.toolCall:
		return "a tool call was in progress"
	case sp.reasoning:
		return "reasoning was in progress"
	case sp.finished:
		return "finish_reason already sent"
	}
	if v, ok := req["response_format"]; ok && !isNull(v) {
		var rf struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(v, &rf)
		if rf.Type != "" && rf.Type != "text" {
			return "response_format " + rf.Type
		}
	}
	for _, k := range []string{"guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs"} {
		if set(k) {
			return k + " asked"
		}
	}
	return ""
}

// continueChat makes req continue the assistant message partial: appended
// as the final assistant message (or to it, when the client was already
// continuing one), with vLLM's continue_final_message and no generation
// prompt.
func continueChat(req map[string]json.RawMessage, partial string) string {
	var msgs []json.RawMessage
	if json.Unmarshal(req["messages"], &msgs) != nil || len(msgs) == 0 {
		return "messages is not a list"
	}
	if string(req["continue_final_message"]) == "true" {
		var last struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		}
		if json.Unmarshal(msgs[len(msgs)-1], &last) != nil || last.Role != "assistant" || last.Content == nil {
			return "the continued message has no text content"
		}
		var m map[string]json.RawMessage
		_ = json.Unmarshal(msgs[len(msgs)-1], &m)
		m["content"] = jsonString(*last.Content + partial)
		msgs[len(msgs)-1], _ = json.Marshal(m)
	} else {
		msg, _ := json.Marshal(struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}{"assistant", partial})
		msgs = append(msgs, msg)
	}
	req["messages"], _ = json.Marshal(msgs)
	req["continue_final_message"] = json.RawMessage("true")
	req["add_generation_prompt"] = json.RawMessage("false")
	return ""
}

// continuePrompt makes a text completion's prompt carry the output so
// far: the text appended to a string prompt, the generated token ids to a
// token-id prompt.
func continuePrompt(req map[string]json.RawMessage, partial string, sp *splice) string {
	raw := bytes.TrimSpace(req["prompt"])
	var s string
	if json.Unmarshal(raw, &s) == nil {
		req["prompt"] = jsonString(s + partial)
		return ""
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		if len(ss) != 1 {
			return "several prompts"
		}
		req["prompt"], _ = json.Marshal([]string{ss[0] + partial})
		return ""
	}
	var ids []int64
	nested := false
	if json.Unmarshal(raw, &ids) != nil {
		var nn [][]int64
		if json.Unmarshal(raw, &nn) != nil || len(nn) != 1 {
			return "prompt is neither text nor one token-id list"
		}
		ids, nested = nn[0], true
	}
	if !sp.idsOK || len(sp.ids) == 0 {
		return "token-id prompt and the engine returned no generated token ids"
	}
	ids = append(ids, sp.ids...)
	if nested {
		req["prompt"], _ = json.Marshal([][]int64{ids})
	} else {
		req["prompt"], _ = json.Marshal(ids)
	}
	return ""
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
