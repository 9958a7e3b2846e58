package config

import (
	"os"
	"strings"
	"testing"
)

// [tracing] and [observability] default to what docs/configuration.md
// says, and a bad value is named by section and field.
func TestObserveSections(t *testing.T) {
	c, err := Parse("rolter.toml", []byte(""), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.Tracing.Endpoint != "" || c.Tracing.Protocol != "http" || c.Tracing.SampleRatio != 1 || c.Tracing.ServiceName != "rolter" {
		t.Errorf("tracing defaults %+v", c.Tracing)
	}
	if o := c.Observability; !o.RoutingHeaders || o.RequestLog || o.RequestLogSampleRatio != 1 {
		t.Errorf("observability defaults %+v", o)
	}
	for _, tc := range []struct{ toml, want string }{
		{"[tracing]\nendpoint = \"otel:4318\"\n", "tracing: endpoint"},
		{"[tracing]\nendpoint = \"http://otel:4318\"\nprotocol = \"thrift\"\n", "tracing: protocol"},
		{"[tracing]\nsample_ratio = 1.5\n", "tracing: sample_ratio"},
		{"[observability]\nrequest_log_sample_ratio = -0.1\n", "observability: request_log_sample_ratio"},
	} {
		_, err := Parse("rolter.toml", []byte(tc.toml), func(string) string { return "" })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one naming %s", tc.toml, err, tc.want)
		}
	}
}

// The commented example in examples/ parses.
func TestExampleConfigParses(t *testing.T) {
	data, err := os.ReadFile("../examples/rolter.toml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse("rolter.toml", data, func(string) string { return "set" }); err != nil {
		t.Fatal(err)
	}
}
