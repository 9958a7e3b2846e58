package router

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rolter/rolter/strategies"
)

// idsText writes ids as a JSON array, with sep between elements.
func idsText(ids []uint32, sep string) []byte {
	b := []byte{'['}
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
			b = append(b, sep...)
		}
		b = strconv.AppendUint(b, uint64(id), 10)
	}
	return append(b, ']')
}

// FuzzTokenIDs checks the token-id readers against the reference readings:
// a random array of ids (from data, with the whitespace space picks) is
// read exactly as encoding/json reads it, by the body reader and the
// header reader; arbitrary bytes are either left to the decoder or read as
// encoding/json reads them, and a header the fast reader takes reads the
// same through the slow one.
func FuzzTokenIDs(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 255, 7, 0, 0, 0}, uint8(0))
	f.Add([]byte{0, 0, 0, 0}, uint8(3))
	f.Add([]byte(`[1, 2,3 ]`), uint8(1))
	f.Add([]byte(`[01,2]`), uint8(0))
	f.Add([]byte(`[1,-2]`), uint8(0))
	f.Add([]byte(`[4294967296]`), uint8(0))
	f.Add([]byte(`[1.0,2e3]`), uint8(0))
	f.Add([]byte(`[[1,2]]`), uint8(0))
	f.Add([]byte(`[1,2,]`), uint8(0))
	f.Add([]byte(`[null,1]`), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, space uint8) {
		ids := make([]uint32, 0, len(data)/4)
		for i := 0; i+4 <= len(data); i += 4 {
			ids = append(ids, binary.LittleEndian.Uint32(data[i:]))
		}
		if len(ids) > 0 {
			sep := []string{"", " ", "\n\t", "  "}[space%4]
			raw := idsText(ids, sep)
			got, ok := appendTokenIDs(nil, raw)
			if !ok || !slices.Equal(got, ids) {
				t.Fatalf("%s: read %v (ok %v), want %v", raw, got, ok, ids)
			}
			hdr := strings.ReplaceAll(string(raw[1:len(raw)-1]), "\n", " ")
			if h, err := parseTokenIDs(hdr); err != nil || !slices.Equal(h, ids) {
				t.Fatalf("header %q: %v, %v", hdr, h, err)
			}
		}
		// Arbitrary bytes as a body's prompt.
		if json.Valid(data) {
			if got, ok := appendTokenIDs(nil, data); ok {
				var want []uint32
				if err := json.Unmarshal(data, &want); err != nil || !slices.Equal(got, want) {
					t.Fatalf("%q: read %v, encoding/json %v (%v)", data, got, want, err)
				}
			}
		}
		if got, end, ok := readTokenIDs(nil, data, 0); ok && len(got) < maxTokenIDs {
			// ok promises that the span read is valid JSON, these ids.
			var want []uint32
			if err := json.Unmarshal(data[:end], &want); err != nil || !slices.Equal(got, want) {
				t.Fatalf("%q: read %v, encoding/json %v (%v)", data[:end], got, want, err)
			}
		}
		// Arbitrary bytes as a header.
		h := strings.TrimSpace(string(data))
		if h == "" {
			return
		}
		fast, fok := scanTokenIDHeader(h)
		slow, err := splitTokenIDs(h)
		if fok && (err != nil || !slices.Equal(fast, slow)) {
			t.Fatalf("header %q: fast %v, slow %v (%v)", h, fast, slow, err)
		}
	})
}

// A completions prompt of token ids reaches the engine byte for byte and is
// keyed; a malformed one gets the OpenAI-shaped 400 and reaches no engine;
// one the fast reader leaves to the decoder is still served whole.
func TestTokenIDPromptThroughTheRouter(t *testing.T) {
	var mu sync.Mutex
	var got [][]byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(cannedJSON)
	}))
	defer up.Close()
	h := newHarness(t, providers("a", up.URL)+`
[[routes]]
model = "llama"
strategy = "precise_cache_aware"
targets = [{provider = "a", model = "llama"}]
`, nil)
	seen := func() [][]byte { mu.Lock(); defer mu.Unlock(); return slices.Clone(got) }
	long := string(tokenBody(4096))
	for _, body := range []string{long, `{"model":"llama","prompt":[1, -2, 3.5],"max_tokens":1}`, `{"model":"llama","prompt":[[1,2],[3]]}`} {
		n := len(seen())
		if code, _, out := h.post("/v1/completions", body); code != 200 {
			t.Fatalf("%.60s: status %d %s", body, code, out)
		}
		if g := seen(); len(g) != n+1 || string(g[n]) != body {
			t.Fatalf("%.60s: the engine got %d requests, last %.60q", body, len(g)-n, g[len(g)-1])
		}
	}
	for _, body := range []string{`{"model":"llama","prompt":[1,2,}`, `{"model":"llama","prompt":[01,2]}`, `{"model":"llama","prompt":[1,2]`} {
		n := len(seen())
		code, _, out := h.post("/v1/completions", body)
		if code != 400 || errorCode(t, out) == "" {
			t.Fatalf("%s: status %d %s, want an OpenAI-shaped 400", body, code, out)
		}
		if len(seen()) != n {
			t.Fatalf("%s: a malformed body reached the engine", body)
		}
	}
}

// The ids a body's prompt carries become the route context's token ids
// and block keys, read while the body is validated.
func TestParseRequestReadsTokenIDPrompt(t *testing.T) {
	body := tokenBody(100)
	r, err := parseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	var want struct{ Prompt []uint32 }
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.promptIDs, want.Prompt) {
		t.Fatalf("read %d ids, want %d", len(r.promptIDs), len(want.Prompt))
	}
	rc, ref := &strategies.RouteContext{}, &strategies.RouteContext{}
	if err := fillFromRequest(rc, http.Header{}, &r, "", allOfThePrompt); err != nil {
		t.Fatal(err)
	}
	if err := buildRouteContext(ref, http.Header{}, body, r.model, ""); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rc.TokenIDs, want.Prompt) || !slices.Equal(rc.BlockKeys, ref.BlockKeys) || len(rc.BlockKeys) != 100/blockSize ||
		rc.PromptDigest != ref.PromptDigest || rc.Prompt != ref.Prompt {
		t.Fatalf("from the parsed request %+v\nfrom the body %+v", rc, ref)
	}
	if _, err := parseRequest([]byte(`{"model":"m","prompt":[1,2`)); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("truncated ids: %v", err)
	}
}

// digits reads every length of number, at the end of the input and before
// a separator, as strconv does.
func TestDigits(t *testing.T) {
	for _, v := range []uint64{0, 7, 10, 99, 305, 1000, 65535, 128000, 999999, 1234567, 9999999, 12345678, 123456789, 4294967295} {
		text := strconv.FormatUint(v, 10)
		for _, in := range []string{text, text + ",", text + "]xxxxxxxx", text + " 1,2,3,4,5,6"} {
			got, n := digits([]byte(in), 0)
			if got != v || n != len(text) {
				t.Errorf("digits(%q) = %d, %d; want %d, %d", in, got, n, v, len(text))
			}
		}
	}
	if v, n := digits([]byte("42949672960,"), 0); n != 11 || v <= 4294967295 {
		t.Errorf("an 11-digit number read as %d (%d digits)", v, n)
	}
}

// The canonical header names the router indexes are the ones net/http
// files the users' names under.
func TestCanonicalHeaderNames(t *testing.T) {
	for name, canon := range map[string]string{headerSession: canonSession, headerTokenIDs: canonTokenIDs} {
		if got := http.CanonicalHeaderKey(name); got != canon {
			t.Errorf("%s is filed as %s, the router reads %s", name, got, canon)
		}
	}
}

// A list of ids of every length from one digit to ten, with or without
// spaces, with a leading zero, a sign, a fraction or a stray separator
// spliced in anywhere, followed by whatever the body holds next, is read
// exactly as encoding/json reads it, or left to it: the eight-bytes-at-a-
// time run hands every element it does not take to the general reading.
func TestTokenIDsMatchDecoderOnEveryLength(t *testing.T) {
	rng := uint64(1)
	next := func() uint64 { rng = rng*6364136223846793005 + 1442695040888963407; return rng >> 33 }
	pow := []uint64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10}
	var ids []uint32
	for range 2000 {
		d := 1 + next()%10
		ids = append(ids, uint32(min(pow[d-1]+next()%(pow[d]-pow[d-1]), 1<<32-1)))
	}
	edits := []string{"", " ", "0", "-", ".5", ",", "]", "00", "\n", "e1"}
	tails := []string{"", `,"max_tokens":8}`, `}`, "  ]"}
	for _, sep := range []string{"", " "} {
		clean := idsText(ids, sep)
		for trial := range 400 {
			raw := slices.Clone(clean)
			if trial > 0 {
				at := 1 + int(next()%uint64(len(raw)-2))
				e := edits[next()%uint64(len(edits))]
				raw = slices.Insert(raw, at, []byte(e)...)
			}
			body := append(slices.Clone(raw), tails[trial%len(tails)]...)
			got, end, ok := readTokenIDs(nil, body, 0)
			var want []uint32
			werr := json.Unmarshal(raw, &want)
			if trial == 0 && (!ok || end != len(raw) || !slices.Equal(got, ids)) {
				t.Fatalf("sep %q: the clean list read as %d ids (ok %v, end %d of %d)", sep, len(got), ok, end, len(raw))
			}
			if !ok {
				continue
			}
			if end != len(raw) {
				// The edit closed the list early: what was read is a
				// shorter valid list.
				if err := json.Unmarshal(body[:end], &want); err != nil {
					t.Fatalf("read %q as a list of ids: %v", body[:end], err)
				}
			} else if werr != nil {
				t.Fatalf("read %d ids from a list encoding/json rejects (%v)", len(got), werr)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("sep %q trial %d: read %d ids, encoding/json %d; first difference at %d", sep, trial, len(got), len(want), firstDiff(got, want))
			}
		}
	}
}

func firstDiff(a, b []uint32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// The header reader takes ids of every length, with or without spaces,
// as strconv does, and leaves every value it cannot take to the slow
// reading, which then decides.
func TestTokenIDHeaderMatchesStrconvOnEveryLength(t *testing.T) {
	rng := uint64(7)
	next := func() uint64 { rng = rng*6364136223846793005 + 1442695040888963407; return rng >> 33 }
	pow := []uint64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10}
	var ids []uint32
	for range 2000 {
		d := 1 + next()%10
		ids = append(ids, uint32(min(pow[d-1]+next()%(pow[d]-pow[d-1]), 1<<32-1)))
	}
	edits := []string{" ", "0", "-", ".5", ",", "\t", "00", "x", ", ,"}
	for _, sep := range []string{"", " "} {
		full := idsText(ids, sep)
		clean := string(full[1 : len(full)-1])
		for trial := range 300 {
			h := clean
			if trial > 0 {
				at := int(next() % uint64(len(h)))
				h = h[:at] + edits[next()%uint64(len(edits))] + h[at:]
			}
			fast, ok := scanTokenIDHeader(h)
			if trial == 0 && (!ok || !slices.Equal(fast, ids)) {
				t.Fatalf("sep %q: the clean header read as %d ids (ok %v)", sep, len(fast), ok)
			}
			slow, err := splitTokenIDs(h)
			if ok && (err != nil || !slices.Equal(fast, slow)) {
				t.Fatalf("sep %q trial %d: fast read %d ids, strconv %d (%v); first difference at %d", sep, trial, len(fast), len(slow), err, firstDiff(fast, slow))
			}
		}
	}
}
