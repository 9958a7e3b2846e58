package router

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// refusalOf is the reference answer to a body parseRequest must refuse
// before reading its fields: UTF-8 is judged first, then JSON, then the
// shape; "" for a body it must read further.
func refusalOf(body []byte) string {
	switch {
	case !utf8.Valid(body):
		return "not valid UTF-8"
	case !json.Valid(body):
		return "not valid JSON"
	case !strings.HasPrefix(strings.TrimLeft(string(body), " \t\r\n"), "{"):
		return "must be a JSON object"
	}
	return ""
}

// parseRequest reads UTF-8 in the same pass as JSON; a body it refuses
// gets the answer the two checks made one after the other give: invalid
// UTF-8 anywhere (in a key, a short or long value, nested, after or before
// a JSON error) is named as such, and valid non-ASCII text is accepted.
func TestParseRequestJudgesUTF8AndJSONAsBefore(t *testing.T) {
	long := strings.Repeat("plain text ", 20)
	accents := strings.Repeat("é and ü ", 20)
	cases := map[string]string{
		"valid":                     `{"model":"m","messages":[{"role":"user","content":"` + long + accents + `"}]}`,
		"valid non-ASCII key":       `{"model":"m","é":"` + accents + `","ключ":{"名前":"` + long + `"}}`,
		"bad byte in short value":   "{\"model\":\"m\xff\"}",
		"bad byte in long value":    `{"model":"m","messages":[{"content":"` + long + "\xff" + long + `"}]}`,
		"bad byte after accents":    `{"model":"m","messages":[{"content":"` + accents + "\xc3(" + long + `"}]}`,
		"truncated rune at quote":   `{"model":"m","messages":[{"content":"` + long + "\xe2\x82" + `"}]}`,
		"bad byte in key":           "{\"model\":\"m\",\"k\xff\":1}",
		"bad byte in nested key":    "{\"model\":\"m\",\"a\":{\"b\xfe\":1}}",
		"bad byte after escape":     `{"model":"m","x":"` + long + `\n` + "\xff" + `"}`,
		"bad byte then bad JSON":    "{\"model\":\"m\",\"x\":\"\xff\",}",
		"bad JSON then bad byte":    "{\"model\":\"m\",,\"x\":\"\xff\"}",
		"bad byte outside a string": "{\"model\":\"m\",\"x\":1\xff}",
		"control after accents":     `{"model":"m","x":"` + accents + "\x01" + `"}`,
		"control in long ASCII":     `{"model":"m","x":"` + long + "\x1f" + long + `"}`,
		"surrogate bytes":           "{\"model\":\"m\",\"x\":\"" + long + "\xed\xa0\x80\"}",
		"overlong":                  "{\"model\":\"m\",\"x\":\"" + long + "\xc0\xaf\"}",
		"bad byte, not an object":   "[\"\xff\"]",
		"not an object":             `["` + accents + `"]`,
		"not JSON":                  `{"model":"m"`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			b := []byte(body)
			_, err := parseRequest(b)
			want := refusalOf(b)
			switch {
			case want == "" && err != nil:
				t.Fatalf("refused a readable body: %v", err)
			case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
				t.Fatalf("answered %v, want %q", err, want)
			case err != nil && !errors.Is(err, ErrBadRequest):
				t.Fatalf("error %v does not wrap ErrBadRequest", err)
			}
		})
	}
}

// Every kind of byte that ends plain ASCII text, at every position of
// strings up to 100 bytes long (so at every offset in and across the
// words and 32-byte blocks read at once), in a key and in a value: parseRequest
// accepts exactly the bodies that are UTF-8 and JSON, and refuses the
// others with the answer of the two checks made one after the other.
func TestParseRequestTextEveryPosition(t *testing.T) {
	inserts := []string{"\x01", "\x1f", "\t", `\n`, `\"`, `\u00e9`, `\x`, `\u12`, `"`, "é", "\x7f", "\xff", "\xc3", "€", "\xe2\x82", `\\`}
	for n := range 100 {
		for at := range n + 1 {
			for _, ins := range inserts {
				s := strings.Repeat("a", at) + ins + strings.Repeat("b", n-at)
				for _, doc := range []string{`{"model":"m","x":"` + s + `"}`, `{"model":"m","` + s + `":1}`, `{"model":"m","x":["` + s + `"]}`} {
					b := []byte(doc)
					_, err := parseRequest(b)
					want := refusalOf(b)
					if (err == nil) != (want == "") || err != nil && !strings.Contains(err.Error(), want) {
						t.Fatalf("parseRequest(%q) = %v, want %q", doc, err, want)
					}
				}
			}
		}
	}
}
