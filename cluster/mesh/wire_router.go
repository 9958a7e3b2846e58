package mesh

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// LearnedKind says what a shared learned record means.
type LearnedKind uint8

// Kinds of records routers share.
const (
	// LearnedPrefix: a cache_aware observation — a prompt prefix (Key, a
	// hash) was routed to Target for Model.
	LearnedPrefix LearnedKind = 1
	// LearnedPin: a pipeline session pin — session Key is pinned to Target
	// for Model.
	LearnedPin LearnedKind = 2
)

// maxPrefill bounds the queued-prefill tokens a peer can claim per engine.
const maxPrefill = 1 << 40

// maxRank bounds the rank a peer can claim with an intent.
const maxRank = 1 << 16

// maxLearnedTTL bounds the lifetime a peer can ask for.
const maxLearnedTTL = time.Hour

// Learned is one opaque, small record a router shares with the other
// routers. The mesh carries it; the strategies give it meaning.
type Learned struct {
	Kind   LearnedKind
	Model  string
	Target string // engine URL
	Key    uint64 // prefix hash or session id hash
	TTL    time.Duration
	From   string // sending router's node name; set on receipt
}

func appendSub(b []byte, num protowire.Number, sub []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, sub)
}

func encodeInflight(m *inflightMsg) []byte {
	b := appendHeader(make([]byte, 0, 64+40*len(m.Entries)), msgInflight, m.From)
	var sub []byte
	for _, e := range m.Entries {
		sub = appendString(sub[:0], 1, e.URL)
		sub = protowire.AppendTag(sub, 2, protowire.VarintType)
		sub = protowire.AppendVarint(sub, e.N)
		if e.Prefill > 0 {
			sub = protowire.AppendTag(sub, 3, protowire.VarintType)
			sub = protowire.AppendVarint(sub, e.Prefill)
		}
		for b, n := range e.Waiting {
			if n > 0 {
				sub = protowire.AppendTag(sub, protowire.Number(4+b), protowire.VarintType)
				sub = protowire.AppendVarint(sub, n)
			}
		}
		b = appendSub(b, 3, sub)
	}
	if m.ConfigVersion > 0 {
		b = appendUint(b, 4, m.ConfigVersion)
	}
	if m.Changed > 0 {
		b = appendFixed(b, 5, m.Changed)
	}
	if m.Sent > 0 {
		b = appendFixed(b, 6, m.Sent)
	}
	if m.Intent > 0 {
		b = appendFixed(b, 7, m.Intent)
		b = appendUint(b, 8, m.Rank)
		if m.Pending {
			b = appendUint(b, 9, 1)
		}
	}
	return b
}

func learnedSize(r *Learned) int { return 24 + len(r.Model) + len(r.Target) }

func encodeLearned(m *learnedMsg) []byte {
	b := appendHeader(make([]byte, 0, 64), msgLearned, m.From)
	var sub []byte
	for i := range m.Records {
		r := &m.Records[i]
		sub = appendUint(sub[:0], 1, uint64(r.Kind))
		sub = appendString(sub, 2, r.Model)
		sub = appendString(sub, 3, r.Target)
		sub = appendFixed(sub, 4, r.Key)
		sub = appendUint(sub, 5, uint64(r.TTL.Milliseconds()))
		b = appendSub(b, 3, sub)
	}
	return b
}

// eachSub walks a nested message's fields.
func eachSub(b []byte, f func(field) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: nested tag", errMalformed)
		}
		b = b[n:]
		fl := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			fl.u, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			fl.u, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			fl.b, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: nested field %d", errMalformed, num)
		}
		b = b[n:]
		if err := f(fl); err != nil {
			return err
		}
	}
	return nil
}

func boundedString(b []byte) (string, error) {
	if len(b) > maxStringLen {
		return "", fmt.Errorf("%w: string of %d bytes", errMalformed, len(b))
	}
	return string(b), nil
}

func decodeInflight(b []byte) (*inflightMsg, error) {
	m := &inflightMsg{}
	var err error
	m.From, err = eachField(b, func(fl field) error {
		if fl.num == 4 && fl.typ == protowire.VarintType {
			m.ConfigVersion = fl.u
			return nil
		}
		if fl.num == 8 && fl.typ == protowire.VarintType {
			m.Rank = min(fl.u, maxRank)
			return nil
		}
		if fl.num == 9 && fl.typ == protowire.VarintType {
			m.Pending = fl.u != 0
			return nil
		}
		if fl.typ == protowire.Fixed64Type && fl.num >= 5 && fl.num <= 7 {
			switch fl.num {
			case 5:
				m.Changed = fl.u
			case 6:
				m.Sent = fl.u
			case 7:
				m.Intent = min(fl.u, 1<<62)
			}
			return nil
		}
		if fl.num != 3 || fl.typ != protowire.BytesType {
			return nil
		}
		if len(m.Entries) >= maxEntriesPerMsg {
			return fmt.Errorf("%w: more than %d in-flight entries", errMalformed, maxEntriesPerMsg)
		}
		var e inflightEntry
		err := eachSub(fl.b, func(sf field) error {
			var err error
			switch sf.num {
			case 1:
				e.URL, err = boundedString(sf.b)
			case 2:
				e.N = clampCount(sf.u)
			case 3:
				e.Prefill = min(sf.u, maxPrefill)
			case 4, 5, 6:
				e.Waiting[sf.num-4] = clampCount(sf.u)
			}
			return err
		})
		if err != nil {
			return err
		}
		if e.URL != "" {
			m.Entries = append(m.Entries, e)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

func decodeLearned(b []byte) (*learnedMsg, error) {
	m := &learnedMsg{}
	var err error
	m.From, err = eachField(b, func(fl field) error {
		if fl.num != 3 || fl.typ != protowire.BytesType {
			return nil
		}
		if len(m.Records) >= maxEntriesPerMsg {
			return fmt.Errorf("%w: more than %d learned records", errMalformed, maxEntriesPerMsg)
		}
		var r Learned
		err := eachSub(fl.b, func(sf field) error {
			var err error
			switch sf.num {
			case 1:
				if sf.u != uint64(LearnedPrefix) && sf.u != uint64(LearnedPin) {
					return fmt.Errorf("%w: learned kind %d", errMalformed, sf.u)
				}
				r.Kind = LearnedKind(sf.u)
			case 2:
				r.Model, err = boundedString(sf.b)
			case 3:
				r.Target, err = boundedString(sf.b)
			case 4:
				r.Key = sf.u
			case 5:
				r.TTL = min(time.Duration(min(sf.u, uint64(maxLearnedTTL/time.Millisecond)))*time.Millisecond, maxLearnedTTL)
			}
			return err
		})
		if err != nil {
			return err
		}
		if r.Kind == 0 || r.Target == "" {
			return fmt.Errorf("%w: learned record without kind or target", errMalformed)
		}
		m.Records = append(m.Records, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range m.Records {
		m.Records[i].From = m.From
	}
	return m, nil
}
