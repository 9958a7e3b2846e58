package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// The admin state as a linearizable object, for porcupine: providers by
// name, each absent or at an api_base. Writes answer what the state was
// when Raft applied them (create: 201 or 409 "exists"; update: 200 or 404;
// delete: 204 or 404), so a history of writes and their answers pins the
// order they took effect in; reads are taken only at the end, from every
// router, once no write is in flight.

// AdminInput is one operation on provider Name.
type AdminInput struct {
	Kind  string // "create", "update", "delete", "read"
	Name  string
	Value string // api_base written
}

// AdminOutput is its answer. Unknown marks an operation that never got a
// definite answer: it may or may not have taken effect.
type AdminOutput struct {
	Status  string // "ok", "exists", "absent"
	Value   string // read: the api_base ("" when absent)
	Unknown bool
}

// AdminModel is the sequential specification of the providers table,
// partitioned by name (providers are independent registers).
func AdminModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var names []string
			for _, op := range h {
				n := op.Input.(AdminInput).Name
				if _, ok := by[n]; !ok {
					names = append(names, n)
				}
				by[n] = append(by[n], op)
			}
			sort.Strings(names)
			out := make([][]porcupine.Operation, 0, len(names))
			for _, n := range names {
				out = append(out, by[n])
			}
			return out
		},
		Init: func() any { return "" },
		Step: func(state, input, output any) (bool, any) {
			st, in, out := state.(string), input.(AdminInput), output.(AdminOutput)
			present := st != ""
			switch in.Kind {
			case "create":
				if out.Unknown {
					if present {
						return true, st
					}
					return true, in.Value
				}
				if present {
					return out.Status == "exists", st
				}
				return out.Status == "ok", in.Value
			case "update":
				if !present {
					return out.Unknown || out.Status == "absent", st
				}
				return out.Unknown || out.Status == "ok", in.Value
			case "delete":
				if !present {
					return out.Unknown || out.Status == "absent", st
				}
				return out.Unknown || out.Status == "ok", ""
			case "read":
				return out.Value == st, st
			}
			return false, st
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(AdminInput), output.(AdminOutput)
			if out.Unknown {
				return fmt.Sprintf("%s(%s, %s) → ?", in.Kind, in.Name, in.Value)
			}
			return fmt.Sprintf("%s(%s, %s) → %s %s", in.Kind, in.Name, in.Value, out.Status, out.Value)
		},
	}
}

// History records operations with their invocation and response times.
type History struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
	// Attempts counts HTTP requests; Retries those after the first of an
	// operation (same Idempotency-Key).
	Attempts, Retries int
}

// NewHistory starts a history whose times count from now.
func NewHistory() *History { return &History{start: time.Now()} }

func (h *History) now() int64 { return int64(time.Since(h.start)) }

func (h *History) add(op porcupine.Operation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, op)
}

// Ops returns the recorded operations; unknown ones end after every other.
func (h *History) Ops() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]porcupine.Operation, len(h.ops))
	copy(out, h.ops)
	var last int64
	for _, op := range out {
		last = max(last, op.Return)
	}
	for i := range out {
		if out[i].Output.(AdminOutput).Unknown {
			out[i].Return = last + 1
		}
	}
	return out
}

// Counts returns how many operations ended definite (writes only) and
// how many stayed unknown.
func (h *History) Counts() (definite, unknown int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, op := range h.ops {
		switch {
		case op.Input.(AdminInput).Kind == "read":
		case op.Output.(AdminOutput).Unknown:
			unknown++
		default:
			definite++
		}
	}
	return definite, unknown
}

// AdminWriter is one client writing through one router's admin API.
type AdminWriter struct {
	ID    int
	Admin string
	Token string
	Names []string
	Rand  *rand.Rand
	// Attempt bounds one HTTP request; Deadline is when the writer stops
	// retrying an operation that has no definite answer yet.
	Attempt  time.Duration
	Deadline time.Time
}

// Run issues operations until ctx ends, each retried with its
// Idempotency-Key on a timeout, a transport error or a 5xx until it gets
// a definite answer or w.Deadline passes.
func (w *AdminWriter) Run(ctx context.Context, h *History) error {
	for n := 0; ctx.Err() == nil; n++ {
		in := AdminInput{Name: w.Names[w.Rand.IntN(len(w.Names))]}
		switch k := w.Rand.IntN(3); k {
		case 0:
			in.Kind = "create"
		case 1:
			in.Kind = "update"
		default:
			in.Kind = "delete"
		}
		if in.Kind != "delete" {
			in.Value = fmt.Sprintf("http://127.0.0.1:9/c%d-%d", w.ID, n)
		}
		key := fmt.Sprintf("c%d-op%d", w.ID, n)
		op := porcupine.Operation{ClientId: w.ID, Input: in, Call: h.now()}
		out, err := w.write(in, key, h)
		if err != nil {
			return err
		}
		op.Output, op.Return = out, h.now()
		h.add(op)
		time.Sleep(time.Duration(20+w.Rand.IntN(60)) * time.Millisecond)
	}
	return nil
}

func (w *AdminWriter) write(in AdminInput, key string, h *History) (AdminOutput, error) {
	method, path, body := http.MethodPost, "/api/v1/providers", fmt.Sprintf(`{"name":%q,"api_base":%q}`, in.Name, in.Value)
	switch in.Kind {
	case "update":
		method, path, body = http.MethodPut, "/api/v1/providers/"+in.Name, fmt.Sprintf(`{"api_base":%q}`, in.Value)
	case "delete":
		method, path, body = http.MethodDelete, "/api/v1/providers/"+in.Name, ""
	}
	for try := 0; ; try++ {
		h.mu.Lock()
		h.Attempts++
		if try > 0 {
			h.Retries++
		}
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), w.Attempt)
		code, b, err := Do(ctx, method, w.Admin+path, w.Token, body, "Idempotency-Key", key)
		cancel()
		switch {
		case err == nil && code < 300:
			return AdminOutput{Status: "ok"}, nil
		case err == nil && code == http.StatusNotFound && in.Kind != "create":
			return AdminOutput{Status: "absent"}, nil
		case err == nil && code == http.StatusConflict && in.Kind == "create" && errorCode(b) == "conflict":
			return AdminOutput{Status: "exists"}, nil
		case err == nil && code < 500 && code != http.StatusTooManyRequests:
			return AdminOutput{}, fmt.Errorf("%s %s on %s: %d %s", method, path, w.Admin, code, b)
		}
		if time.Now().After(w.Deadline) {
			return AdminOutput{Unknown: true}, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func errorCode(b []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return e.Error.Code
}

// ReadAll reads every name from admin and records the reads.
func ReadAll(ctx context.Context, h *History, client int, admin, token string, names []string) error {
	for _, n := range names {
		op := porcupine.Operation{ClientId: client, Input: AdminInput{Kind: "read", Name: n}, Call: h.now()}
		code, b, err := Do(ctx, http.MethodGet, admin+"/api/v1/providers/"+n, token, "")
		if err != nil {
			return err
		}
		var out AdminOutput
		switch code {
		case http.StatusOK:
			var p struct {
				APIBase string `json:"api_base"`
			}
			if err := json.Unmarshal(b, &p); err != nil {
				return err
			}
			out = AdminOutput{Status: "ok", Value: p.APIBase}
		case http.StatusNotFound:
			out = AdminOutput{Status: "absent"}
		default:
			return fmt.Errorf("GET provider %s on %s: %d %s", n, admin, code, b)
		}
		op.Output, op.Return = out, h.now()
		h.add(op)
	}
	return nil
}
