package sidecar

import (
	"errors"
	"reflect"
	"testing"

	"github.com/rolter/rolter/scrape"
)

func TestParseModels(t *testing.T) {
	body := `{"object":"list","data":[
		{"id":"sql-adapter","object":"model","root":"/lora/sql","parent":"base"},
		{"id":"base","object":"model","root":"base","parent":null,"max_model_len":8192},
		{"id":"self","parent":"self"},
		{"id":""}]}`
	got, err := ParseModels([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := EngineModels{Models: []string{"base", "self"}, Adapters: []string{"sql-adapter"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if _, err := ParseModels([]byte("<html>")); !errors.Is(err, scrape.ErrScrape) {
		t.Fatalf("want ErrScrape, got %v", err)
	}
}
