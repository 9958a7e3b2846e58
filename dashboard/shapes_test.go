package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestAPIShapes feeds api.js the JSON adminapi actually sends (as of its
// first commit) and checks what the screens would see, so a drift between
// the two shows up here rather than as a blank table.
func TestAPIShapes(t *testing.T) {
	p := newPage(t, newFakeAdmin(testToken))
	p.open("")
	p.run("page", chromedp.WaitVisible(chromedp.CSS("#token")))

	cases := []struct {
		name string
		fn   string
		in   string
		want string
	}{
		{"cluster from adminapi: raft and gossip routers, no engines yet", "fromCluster",
			`{"leader":"n1","node_id":"n1","config_version":7,"routers":[
				{"node_id":"n1","raft_addr":"127.0.0.1:7947","admin_addr":"127.0.0.1:4001","raft_role":"leader","voter":true,"alive":true,"config_version":7},
				{"node_id":"n2","raft_addr":"127.0.0.1:7957","raft_role":"follower","voter":true,"config_version":null},
				{"node_id":"n3","raft_role":"none","voter":false,"alive":false,"config_version":6}]}`,
			`{"leader":"n1","configVersion":7,"routers":[
				{"nodeId":"n1","address":"127.0.0.1:4001","raftAddr":"127.0.0.1:7947","build":"","raftRole":"leader","appliedConfigVersion":7,"alive":true,"admission":null},
				{"nodeId":"n2","address":"","raftAddr":"127.0.0.1:7957","build":"","raftRole":"follower","appliedConfigVersion":null,"alive":true,"admission":null},
				{"nodeId":"n3","address":"","raftAddr":"","build":"","raftRole":"none","appliedConfigVersion":6,"alive":false,"admission":null}],"engines":[]}`},
		{"cluster engine with the router's queued-prefill estimate", "fromCluster",
			`{"leader":"n1","config_version":1,"routers":[],"engines":[{"node_id":"s1","engine_url":"http://e1:8000","models":["m"],
				"state":"EXACT","age_ms":120,"resident_blocks":40,"running":2,"waiting":1,"kv_usage":0.5,"lmcache_occupancy":null,
				"adapters":[],"max_loras":0,"remote_inflight":1,"queued_prefill_tokens":9000,"kv_events":true,"lmcache":false,
				"prefix_cache_hit_rate":0.25}]}`,
			`{"leader":"n1","configVersion":1,"routers":[],"engines":[{"nodeId":"s1","engineUrl":"http://e1:8000","models":["m"],
				"state":"EXACT","ageMs":120,"residentBlocks":40,"running":2,"waiting":1,"kvUsage":0.5,"lmcacheOccupancy":null,
				"adapters":[],"kvEvents":true,"lmcache":false,"hitRate":0.25,"queuedPrefill":9000}]}`},
		{"policy with a null updated_at", "fromPolicy",
			`{"enabled":false,"latency_weight":1,"cost_weight":0.5,"load_weight":0.25,"exploration_ratio":0.05,"min_samples":50,"updated_at":null,"affected_routes":["a","b"]}`,
			`{"enabled":false,"latencyWeight":1,"costWeight":0.5,"loadWeight":0.25,"explorationRatio":0.05,"minSamples":50,"updatedAt":"","affectedRoutes":["a","b"]}`},
		{"audit from adminapi", "fromAudit",
			`{"data":[{"seq":9,"time":"2026-11-29T10:00:00Z","actor":"ops","action":"adaptive_routing_policy.update","resource":"adaptive-routing-policy","outcome":"ok","config_version":12}]}`,
			`[{"seq":9,"time":"2026-11-29T10:00:00Z","actor":"ops","action":"adaptive_routing_policy.update","resource":"adaptive-routing-policy","outcome":"ok","configVersion":12,"detail":""}]`},
		{"route with omitted weight and discover", "fromRoute",
			`{"model":"m","strategy":"adaptive","targets":[{"provider":"p"}],"readonly":false}`,
			`{"raw":{"model":"m","strategy":"adaptive","targets":[{"provider":"p"}],"readonly":false},"key":"m","model":"m","strategy":"adaptive",
				"targets":[{"provider":"p","model":"","weight":1}],"discover":false,"maxLoras":0,"enabled":null,"readonly":false,"managedBy":"api"}`},
		{"file-owned route", "fromRoute",
			`{"model":"m","strategy":"round_robin","targets":[{"provider":"p","weight":2}],"readonly":true,"managed_by":"file"}`,
			`{"raw":{"model":"m","strategy":"round_robin","targets":[{"provider":"p","weight":2}],"readonly":true,"managed_by":"file"},"key":"m","model":"m",
				"strategy":"round_robin","targets":[{"provider":"p","model":"","weight":2}],"discover":false,"maxLoras":0,"enabled":null,"readonly":true,"managedBy":"file"}`},
		{"a file sync's diff is the audit detail", "fromAudit",
			`{"data":[{"seq":3,"time":"2026-12-01T10:00:00Z","actor":"file:r1","action":"config.file_sync","resource":"config","outcome":"ok","config_version":4,
				"diff":["~ provider/a api_base: http://x → http://y","- route/old"]}]}`,
			`[{"seq":3,"time":"2026-12-01T10:00:00Z","actor":"file:r1","action":"config.file_sync","resource":"config","outcome":"ok","configVersion":4,
				"detail":"~ provider/a api_base: http://x → http://y\n- route/old"}]`},
		{"route with an enabled flag (admin APIs that have one)", "fromRoute",
			`{"model":"m","strategy":"weighted","targets":[{"provider":"p","weight":2}],"enabled":false,"readonly":true}`,
			`{"raw":{"model":"m","strategy":"weighted","targets":[{"provider":"p","weight":2}],"enabled":false,"readonly":true},"key":"m","model":"m","strategy":"weighted",
				"targets":[{"provider":"p","model":"","weight":2}],"discover":false,"maxLoras":0,"enabled":false,"readonly":true,"managedBy":"file"}`},
		{"a route body leaves out enabled where the API has none", "toRouteBody",
			`{"model":"m","strategy":"random","targets":[{"provider":"p","model":"","weight":1}],"discover":false,"maxLoras":0,"enabled":null}`,
			`{"model":"m","strategy":"random","targets":[{"provider":"p","weight":1}],"discover":false,"max_loras":0}`},
		{"key from adminapi, no provider allowlist", "fromKey",
			`{"name":"k","models":["chat"],"readonly":false,"created_at":"2026-12-01T08:00:00Z"}`,
			`{"name":"k","models":["chat"],"providers":null,"createdAt":"2026-12-01T08:00:00Z","readonly":false,"secret":""}`},
		{"key with a provider allowlist and its secret", "fromKey",
			`{"name":"k","models":[],"providers":["gpu-a"],"readonly":false,"secret":"sk-rolter-x"}`,
			`{"name":"k","models":[],"providers":["gpu-a"],"createdAt":"","readonly":false,"secret":"sk-rolter-x"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			js := fmt.Sprintf(`import('./api.js').then((m) => JSON.stringify(m.%s(%s)))`, tc.fn, tc.in)
			ctx, cancel := context.WithTimeout(p.ctx, 15*time.Second)
			defer cancel()
			got, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
			if err != nil {
				t.Fatal(err)
			}
			var g, w any
			if err := json.Unmarshal([]byte(got), &g); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.want), &w); err != nil {
				t.Fatal(err)
			}
			gb, _ := json.Marshal(g)
			wb, _ := json.Marshal(w)
			if string(gb) != string(wb) {
				t.Errorf("%s:\n got %s\nwant %s", tc.fn, gb, wb)
			}
		})
	}
}
