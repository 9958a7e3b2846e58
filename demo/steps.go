package demo

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/rolter/rolter/localfleet"
	"github.com/rolter/rolter/sim"
)

// printNextSteps tells the user where everything is and what to try.
func (d *demo) printNextSteps(w io.Writer, elapsed time.Duration) {
	r1 := d.plan.Routers[0]
	api := r1.APIURL() + "/v1"
	admin := r1.AdminURL()
	leader := "?"
	if c, err := d.cluster(context.Background(), r1); err == nil {
		leader = c.Leader
	}
	sidecars := fmt.Sprintf("%d sidecars gossiping engine state", Engines)
	if !d.opts.Sidecars {
		sidecars = "NO sidecars (--sidecars=false): routers see no KV residency, LMCache or engine load, and discovery is off"
	}
	fmt.Fprintf(w, "\nrolter demo ready in %.1fs: %d routers (Raft leader %s), %d simulated engines (speed %gx), %s\n",
		elapsed.Seconds(), Routers, leader, Engines, d.opts.SimSpeed, sidecars)
	if !d.opts.KVEvents {
		fmt.Fprintln(w, "NOTE: this rolter was built without cgo, so the engines publish no KV events and "+
			"precise_cache_aware has no exact KV residency to use (build with CGO_ENABLED=1 and libzmq for KV events)")
	}
	var apis, admins []string
	for _, r := range d.plan.Routers {
		apis = append(apis, r.APIURL()+"/v1")
		admins = append(admins, r.AdminURL())
	}
	fmt.Fprintf(w, "\nAPI (OpenAI-compatible)\n  API     %s\n  (every router serves every route: also %s)\n", api, strings.Join(apis[1:], ", "))
	fmt.Fprintln(w, "\nModels")
	for _, r := range routes {
		fmt.Fprintf(w, "  %-34s %-20s %s\n", r.model, r.strategy, r.what)
	}
	fmt.Fprintf(w, "  %-34s %-20s %s\n", "lora/<adapter>", "lora_aware",
		"provider group of passthrough members, e.g. lora/adapter-001; keeps each adapter on few engines (2 fit per engine)")
	if d.opts.Sidecars {
		fmt.Fprintf(w, "  %-34s %-20s %s\n", sim.DefaultModelName, "power_of_two", "targets discovered over gossip (no list in the config)")
	}
	fmt.Fprintf(w, "  %-34s %-20s %s\n", "engine-1/<model>", "(pinned)", "one engine (engine-1..engine-4), no balancing")

	fmt.Fprintf(w, "\nTry it\n  curl -N %s/chat/completions -H 'Content-Type: application/json' \\\n"+
		"    -d '{\"model\":\"chat\",\"stream\":true,\"max_tokens\":32,\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'\n", api)
	fmt.Fprintf(w, "\n  # openai-python (pip install openai)\n"+
		"  from openai import OpenAI\n"+
		"  client = OpenAI(base_url=%q, api_key=\"unused\")\n"+
		"  stream = client.chat.completions.create(model=\"precise\", stream=True,\n"+
		"      messages=[{\"role\": \"user\", \"content\": \"Hello!\"}])\n"+
		"  for chunk in stream:\n"+
		"      if chunk.choices:\n"+
		"          print(chunk.choices[0].delta.content or \"\", end=\"\", flush=True)\n", api)
	fmt.Fprintf(w, "\n  // openai-go (go get github.com/openai/openai-go)\n"+
		"  client := openai.NewClient(option.WithBaseURL(%q), option.WithAPIKey(\"unused\"))\n"+
		"  stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{\n"+
		"      Model:    \"adaptive\",\n"+
		"      Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(\"Hello!\")},\n"+
		"  })\n"+
		"  for stream.Next() {\n"+
		"      if c := stream.Current(); len(c.Choices) > 0 {\n"+
		"          fmt.Print(c.Choices[0].Delta.Content)\n"+
		"      }\n"+
		"  }\n", api+"/")

	fmt.Fprintf(w, "\n  # streams survive an engine's death (resume_streams): make engine-1 kill half its streams\n"+
		"  # after 5 tokens, stream again, and watch rolter_stream_resumes_total on /metrics\n"+
		"  curl -s http://%s/sim/faults -d '{\"die_rate\":0.5,\"die_after_tokens\":5}'\n", localfleet.Addr(d.plan.Engines[0].HTTP))

	fmt.Fprintf(w, "\nAdmin\n  admin   %s/api/v1/   (also %s)\n  ui      %s/ui/   (paste the admin token)\n  token   %s\n",
		admin, strings.Join(admins[1:], ", "), admin, d.token)
	fmt.Fprintf(w, "  curl -s -H 'Authorization: Bearer %s' %s/api/v1/cluster\n", d.token, admin)
	fmt.Fprintf(w, "  metrics %s/metrics\n", admin)

	fmt.Fprintf(w, "\nFiles (all removed on exit)\n  logs    %s/<name>.log (r1..r3, engine-1..4, engine-N-sidecar)\n"+
		"  data    %s (Raft log and snapshots)\n  config  %s\n\n",
		d.group.LogDir, filepath.Join(d.dir, "data"), d.files.Config)
}
