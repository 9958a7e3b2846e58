package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// Sentinel errors of the data plane. Handlers map them to HTTP status only
// at the edge (writeError).
var (
	ErrBadRequest    = errors.New("bad request")
	ErrUnknownModel  = errors.New("unknown model")
	ErrTooLarge      = errors.New("request body too large")
	ErrHeaderLarge   = errors.New("request header too large")
	ErrReadTimeout   = errors.New("request read timed out")
	ErrBodyMemory    = errors.New("the router is receiving as many large request bodies as it holds memory for")
	ErrUnauthorized  = errors.New("missing or invalid API key")
	ErrForbidden     = errors.New("model not allowed for this API key")
	ErrNoProvider    = errors.New("no provider of this model is allowed for this API key")
	ErrNoTarget      = errors.New("no eligible target")
	ErrTooManyStream = errors.New("too many concurrent streams for this API key")
	ErrUpstream      = errors.New("upstream failed")
	ErrNotFound      = errors.New("not found")
	ErrMethod        = errors.New("method not allowed")
	ErrNoConfig      = errors.New("router has no configuration yet")
	ErrQueueFull     = errors.New("the fleet is saturated and the admission queue is full")
	ErrQueueTimeout  = errors.New("the fleet stayed saturated for the whole admission wait")
)

// apiError is the OpenAI error shape {"error":{"message","type","code"}}.
type apiError struct {
	Error apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
}

// errorClass maps a sentinel to status, OpenAI type and code.
func errorClass(err error) (status int, typ, code string) {
	switch {
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large"
	case errors.Is(err, ErrHeaderLarge):
		return http.StatusRequestHeaderFieldsTooLarge, "invalid_request_error", "request_header_too_large"
	case errors.Is(err, ErrReadTimeout):
		return http.StatusRequestTimeout, "invalid_request_error", "request_timeout"
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest, "invalid_request_error", "invalid_request"
	case errors.Is(err, ErrUnknownModel):
		return http.StatusNotFound, "invalid_request_error", "model_not_found"
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized, "authentication_error", "invalid_api_key"
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden, "permission_error", "model_not_allowed"
	case errors.Is(err, ErrNoProvider):
		return http.StatusForbidden, "permission_error", "provider_not_allowed"
	case errors.Is(err, ErrTooManyStream):
		return http.StatusTooManyRequests, "rate_limit_error", "too_many_streams"
	case errors.Is(err, ErrNoTarget):
		return http.StatusServiceUnavailable, "server_error", "no_eligible_target"
	case errors.Is(err, ErrQueueFull):
		return http.StatusTooManyRequests, "rate_limit_error", "queue_full"
	case errors.Is(err, ErrQueueTimeout):
		return http.StatusServiceUnavailable, "server_error", "queue_timeout"
	case errors.Is(err, ErrBodyMemory):
		return http.StatusServiceUnavailable, "server_error", "body_memory_busy"
	case errors.Is(err, ErrNoConfig):
		return http.StatusServiceUnavailable, "server_error", "not_ready"
	case errors.Is(err, ErrUpstream):
		return http.StatusBadGateway, "server_error", "upstream_error"
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound, "invalid_request_error", "not_found"
	case errors.Is(err, ErrMethod):
		return http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed"
	}
	return http.StatusInternalServerError, "server_error", "internal_error"
}

// writeError writes err in the OpenAI error shape. retryAfter > 0 adds a
// Retry-After header (rounded up to whole seconds).
func writeError(w answer, err error, retryAfter time.Duration) int {
	status, typ, code := errorClass(err)
	w.setHeader("Content-Type", valueJSON)
	if retryAfter > 0 {
		w.setHeader("Retry-After", []string{strconv.Itoa(int((retryAfter + time.Second - 1) / time.Second))})
	}
	w.commit(status)
	_, _ = w.Write(errorJSON(err.Error(), typ, code))
	return status
}

// errorJSON is the OpenAI error object for message, ending in a newline.
// HTML is not escaped: a message that names `Bearer <key>` reads so in
// the body, not as \u003ckey\u003e.
func errorJSON(msg, typ, code string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(apiError{Error: apiErrorBody{Message: msg, Type: typ, Code: code}})
	return b.Bytes()
}

// sseError is the terminal event of a stream that failed after bytes went
// to the client: an OpenAI-shaped error and no [DONE].
func sseError(msg string) []byte {
	b := errorJSON(msg, "server_error", "upstream_stream_error")
	out := make([]byte, 0, len(b)+8)
	out = append(out, "data: "...)
	out = append(out, b...) // b ends in one newline
	return append(out, '\n')
}
