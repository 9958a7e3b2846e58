package adminapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolter/rolter/adaptive"
)

type fakeSource struct{ routes []adaptive.RouteTelemetry }

func (f *fakeSource) AdaptiveTelemetry() []adaptive.RouteTelemetry { return f.routes }

type urls []string

func (u urls) TelemetryEndpoints() []string { return u }

func TestPusherReportsToEveryRouterAndClearsOnce(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	remote := NewTelemetry(clock.Now)
	var posts atomic.Int32
	api := New(Deps{Store: nil, InternalToken: internalToken, Telemetry: remote, Now: clock.Now})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		api.ServeHTTP(w, r)
	}))
	defer srv.Close()
	local := NewTelemetry(clock.Now)
	src := &fakeSource{}
	p := &Pusher{NodeID: "r1", InternalToken: internalToken, Source: src, Local: local, Peers: urls{srv.URL}, Client: srv.Client()}
	ctx := context.Background()

	p.PushOnce(ctx)
	if posts.Load() != 0 {
		t.Fatal("a router with no adaptive route reported")
	}
	src.routes = []adaptive.RouteTelemetry{{Model: "alpha",
		Telemetry: adaptive.Telemetry{Engaged: true, Targets: []adaptive.TargetTelemetry{{Target: "t0", Score: 0.7}}}}}
	p.PushOnce(ctx)
	for name, tab := range map[string]*Telemetry{"local": local, "remote": remote} {
		if v := tab.View(); len(v.Routes) != 1 || v.Routes[0].Nodes[0].NodeID != "r1" {
			t.Fatalf("%s table after a report: %+v", name, v.Routes)
		}
	}
	src.routes = nil
	p.PushOnce(ctx)
	p.PushOnce(ctx)
	if n := posts.Load(); n != 2 {
		t.Fatalf("%d posts, want 2 (one report, one clearing report)", n)
	}
	if v := remote.View(); len(v.Routes) != 0 {
		t.Fatalf("clearing report left rows: %+v", v.Routes)
	}

	bad := &Pusher{NodeID: "r1", InternalToken: "wrong", Source: &fakeSource{routes: src.routes}, Peers: urls{srv.URL}, Client: srv.Client()}
	bad.Source.(*fakeSource).routes = []adaptive.RouteTelemetry{{Model: "beta"}}
	bad.PushOnce(ctx)
	if v := remote.View(); len(v.Routes) != 0 {
		t.Fatal("report with a bad internal token was stored")
	}
}
