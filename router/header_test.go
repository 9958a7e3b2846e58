package router

import (
	"net/http"
	"reflect"
	"testing"
)

// TestHeaderOfKeepsOrderAndRepeats: the conversion both the upstream
// client (the engine's response) and the fasthttp front (the request sent
// upstream) use keeps a repeated key's values in order, under one key,
// and fills the values array it is given.
func TestHeaderOfKeepsOrderAndRepeats(t *testing.T) {
	fields := [][2][]byte{
		{[]byte("Content-Type"), []byte("text/event-stream")},
		{[]byte("Set-Cookie"), []byte("a=1")},
		{[]byte("X-Request-Id"), []byte("r1")},
		{[]byte("Set-Cookie"), []byte("b=2")},
	}
	var values [8]string
	h := headerOf(fields, values[:], 3)
	want := http.Header{
		"Content-Type": {"text/event-stream"},
		"Set-Cookie":   {"a=1", "b=2"},
		"X-Request-Id": {"r1"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("got %v, want %v", h, want)
	}
	if values[0] != "text/event-stream" || values[3] != "b=2" {
		t.Errorf("values %q: the given array holds the values", values)
	}
	// Too few values given: a new array, the same header.
	if h := headerOf(fields, values[:1], 0); !reflect.DeepEqual(h, want) {
		t.Fatalf("with a short values array: %v", h)
	}
	if h := headerOf(nil, nil, 2); h == nil || len(h) != 0 {
		t.Fatalf("no fields: %v, want an empty header", h)
	}
}
