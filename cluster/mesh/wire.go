package mesh

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// Every mesh message is one type byte followed by a protobuf message whose
// schema is documented in mesh.proto. Field 1 of every message is the
// sender's protocol version and field 2 its node name (memberlist does not
// tell a delegate who sent a message).
const (
	msgResidencyDelta byte = 1 // sidecar → each router, UDP (TCP when large)
	msgResidencyFull  byte = 2 // sidecar → one router, TCP stream
	msgEngineStatus   byte = 3 // sidecar → each router, UDP every StatusInterval
	msgResync         byte = 4 // router → sidecar, UDP: resend from a sequence or full
	msgInflight       byte = 5 // router → each other router, UDP
	msgLearned        byte = 6 // router → each other router, UDP
	msgIdentity       byte = 7 // any member → a member that joined, TCP: its certificate
)

// Protocol versions this build speaks. A message whose version is outside
// [ProtocolMin, ProtocolMax] is dropped and counted.
const (
	ProtocolMin uint32 = 1
	ProtocolMax uint32 = 1
)

// Decoding bounds: nothing a peer sends can make a router allocate more.
const (
	maxStringLen     = 256
	maxKeysPerMsg    = 1 << 21
	maxAdapters      = 256
	maxEntriesPerMsg = 1024
	maxCount         = 1 << 20 // running, waiting, max loras, block size
)

// errMalformed marks a message that failed to decode or validate.
var errMalformed = errors.New("mesh: malformed message")

// ResidencyState is how far a view of an engine's KV residency can be
// trusted.
type ResidencyState uint8

// Residency states, as gossiped and as reported by the cluster view.
const (
	StateUnknown  ResidencyState = 0 // never heard of, or no residency yet
	StateExact    ResidencyState = 1 // the event stream is in sequence
	StateDegraded ResidencyState = 2 // a gap is being repaired; not exact
	StateStale    ResidencyState = 3 // no fresh update; neutral
)

func (s ResidencyState) String() string {
	switch s {
	case StateExact:
		return "EXACT"
	case StateDegraded:
		return "DEGRADED"
	case StateStale:
		return "STALE"
	}
	return "UNKNOWN"
}

// residencyMsg is a batched delta (msgResidencyDelta) or a full state
// (msgResidencyFull). Count and Digest describe the set after applying it.
type residencyMsg struct {
	From    string
	Epoch   uint64
	Seq     uint64
	Cleared bool
	State   ResidencyState
	Added   []uint64
	Removed []uint64
	Count   uint64
	Digest  uint64
}

// statusMsg is a sidecar's periodic engine summary; it also carries the
// residency position so a router notices a missed delta without waiting.
type statusMsg struct {
	From     string
	Seq      uint64
	Epoch    uint64
	ResSeq   uint64
	Count    uint64
	Digest   uint64
	ResState ResidencyState
	Status   EngineStatus
}

// resyncMsg asks a sidecar to resend its deltas after HaveSeq of Epoch
// (only those listed in Missing, when it is non-empty), or its full state
// when Full is set (or the deltas are gone).
type resyncMsg struct {
	From    string
	Epoch   uint64
	HaveSeq uint64
	Full    bool
	Missing []uint64
}

// maxMissing bounds the sequence numbers one resync request may list.
const maxMissing = 128

// inflightMsg carries one router's in-flight request count per target URL.
type inflightMsg struct {
	From    string
	Entries []inflightEntry
	// ConfigVersion is the config_version the sending router has applied
	// (0: unknown); the admin API shows which routers have converged.
	ConfigVersion uint64
	// Changed is when the oldest change this message carries was made,
	// Sent when the message was built, both unix nanos on the sender's
	// clock (0: a repeat that carries no change / unknown).
	Changed, Sent uint64
	// Intent is when the sender's latest intent was announced (unix
	// nanos, its clock; 0: none yet), Rank the sender's rank then, and
	// Pending whether its pick is still to come (router/meshstate's order
	// of the first picks of an instant).
	Intent  uint64
	Rank    uint64
	Pending bool
}

type inflightEntry struct {
	URL     string
	N       uint64
	Prefill uint64 // prompt tokens queued for prefill (0 omitted on the wire)
	// Waiting is admission waiters by band (sheddable, standard,
	// critical), fields 4 to 6 (0 omitted).
	Waiting [3]uint64
}

// learnedMsg carries a batch of records a router learned.
type learnedMsg struct {
	From    string
	Records []Learned
}

func appendHeader(b []byte, typ byte, from string) []byte {
	b = append(b, typ)
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(ProtocolMax))
	return appendString(b, 2, from)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendFixed(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, v)
}

func appendFloat(b []byte, num protowire.Number, v float64) []byte {
	b = protowire.AppendTag(b, num, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, math.Float32bits(float32(v)))
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return appendUint(b, num, 1)
}

// appendKeys writes keys (sorted in place) as whichever is smaller: packed
// varint gaps between sorted keys (field deltaNum, good for dense sets such
// as a full state) or packed fixed64 (field fixedNum, good for sparse
// batches where gaps need 9 varint bytes).
func appendKeys(b []byte, deltaNum, fixedNum protowire.Number, keys []uint64) []byte {
	if len(keys) == 0 {
		return b
	}
	slices.Sort(keys)
	size, prev := 0, uint64(0)
	for _, k := range keys {
		size += protowire.SizeVarint(k - prev)
		prev = k
	}
	if size < 8*len(keys) {
		b = protowire.AppendTag(b, deltaNum, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		prev = 0
		for _, k := range keys {
			b = protowire.AppendVarint(b, k-prev)
			prev = k
		}
		return b
	}
	b = protowire.AppendTag(b, fixedNum, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(8*len(keys)))
	for _, k := range keys {
		b = protowire.AppendFixed64(b, k)
	}
	return b
}

func encodeResidency(typ byte, m *residencyMsg) []byte {
	b := make([]byte, 0, 64+9*(len(m.Added)+len(m.Removed)))
	b = appendHeader(b, typ, m.From)
	b = appendUint(b, 3, m.Epoch)
	b = appendUint(b, 4, m.Seq)
	b = appendBool(b, 5, m.Cleared)
	b = appendUint(b, 6, uint64(m.State))
	b = appendKeys(b, 7, 8, m.Added)
	b = appendKeys(b, 9, 10, m.Removed)
	b = appendUint(b, 11, m.Count)
	return appendFixed(b, 12, m.Digest)
}

func encodeStatus(m *statusMsg) []byte {
	s := &m.Status
	b := make([]byte, 0, 128)
	b = appendHeader(b, msgEngineStatus, m.From)
	b = appendUint(b, 3, m.Seq)
	b = appendUint(b, 4, m.Epoch)
	b = appendUint(b, 5, m.ResSeq)
	b = appendUint(b, 6, m.Count)
	b = appendFixed(b, 7, m.Digest)
	b = appendUint(b, 8, uint64(m.ResState))
	b = appendBool(b, 9, s.MetricsOK)
	b = appendUint(b, 10, s.Running)
	b = appendUint(b, 11, s.Waiting)
	b = appendFloat(b, 12, s.KVUsage)
	b = appendUint(b, 13, s.PrefixHits)
	b = appendUint(b, 14, s.PrefixQueries)
	b = appendUint(b, 15, uint64(s.BlockSize))
	b = appendUint(b, 16, uint64(s.MaxLoras))
	for _, a := range s.Adapters {
		b = protowire.AppendTag(b, 17, protowire.BytesType)
		b = protowire.AppendString(b, a)
	}
	b = appendBool(b, 18, s.LMCacheKnown)
	if s.LMCacheKnown {
		b = appendFloat(b, 19, s.LMCacheOccupancy)
	}
	return appendBool(b, 20, s.LMCacheAvailable)
}

func encodeResync(m *resyncMsg) []byte {
	b := appendHeader(make([]byte, 0, 48), msgResync, m.From)
	b = appendUint(b, 3, m.Epoch)
	b = appendUint(b, 4, m.HaveSeq)
	b = appendBool(b, 5, m.Full)
	if len(m.Missing) > 0 { // packed varint gaps after HaveSeq
		var sub []byte
		prev := m.HaveSeq
		for _, q := range m.Missing {
			sub = protowire.AppendVarint(sub, q-prev)
			prev = q
		}
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendBytes(b, sub)
	}
	return b
}

// field is one decoded protobuf field: a varint/fixed value or a byte slice.
type field struct {
	num protowire.Number
	typ protowire.Type
	u   uint64
	b   []byte
}

// eachField walks a protobuf message, checking the version field (1) and
// returning the sender (2); every other field goes to f. Unknown fields are
// skipped, as protobuf requires.
func eachField(b []byte, f func(field) error) (from string, err error) {
	version := uint64(0)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", fmt.Errorf("%w: tag: %v", errMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		fl := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			fl.u, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			fl.u, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(b)
			fl.u = uint64(v)
		case protowire.BytesType:
			fl.b, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return "", fmt.Errorf("%w: field %d: %v", errMalformed, num, protowire.ParseError(n))
		}
		b = b[n:]
		switch num {
		case 1:
			version = fl.u
		case 2:
			if len(fl.b) == 0 || len(fl.b) > maxStringLen {
				return "", fmt.Errorf("%w: sender name length %d", errMalformed, len(fl.b))
			}
			from = string(fl.b)
		default:
			if err := f(fl); err != nil {
				return "", err
			}
		}
	}
	if version < uint64(ProtocolMin) || version > uint64(ProtocolMax) {
		return "", fmt.Errorf("%w: protocol version %d not in [%d,%d]", errMalformed, version, ProtocolMin, ProtocolMax)
	}
	if from == "" {
		return "", fmt.Errorf("%w: no sender", errMalformed)
	}
	return from, nil
}

// consumeKeys appends the keys of a packed key field to dst, refusing more
// than limit keys in total.
func consumeKeys(dst []uint64, fl field, delta bool, limit int) ([]uint64, error) {
	if fl.typ != protowire.BytesType {
		return dst, fmt.Errorf("%w: key field %d has wire type %d", errMalformed, fl.num, fl.typ)
	}
	b := fl.b
	if !delta {
		if len(b)%8 != 0 || len(dst)+len(b)/8 > limit {
			return dst, fmt.Errorf("%w: fixed key list of %d bytes", errMalformed, len(b))
		}
		for len(b) > 0 {
			v, _ := protowire.ConsumeFixed64(b)
			dst = append(dst, v)
			b = b[8:]
		}
		return dst, nil
	}
	prev := uint64(0)
	for len(b) > 0 {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 || len(dst) >= limit {
			return dst, fmt.Errorf("%w: delta key list", errMalformed)
		}
		prev += v
		dst = append(dst, prev)
		b = b[n:]
	}
	return dst, nil
}

func decodeResidency(b []byte, limit int) (*residencyMsg, error) {
	m := &residencyMsg{}
	var err error
	m.From, err = eachField(b, func(fl field) error {
		var err error
		switch fl.num {
		case 3:
			m.Epoch = fl.u
		case 4:
			m.Seq = fl.u
		case 5:
			m.Cleared = fl.u != 0
		case 6:
			if fl.u > uint64(StateDegraded) {
				return fmt.Errorf("%w: residency state %d", errMalformed, fl.u)
			}
			m.State = ResidencyState(fl.u)
		case 7, 8:
			m.Added, err = consumeKeys(m.Added, fl, fl.num == 7, limit-len(m.Removed))
		case 9, 10:
			m.Removed, err = consumeKeys(m.Removed, fl, fl.num == 9, limit-len(m.Added))
		case 11:
			m.Count = fl.u
		case 12:
			m.Digest = fl.u
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// clampFloat maps a wire float to [0,1]; NaN and infinities are refused.
func clampFloat(u uint64) (float64, bool) {
	f := float64(math.Float32frombits(uint32(u)))
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return min(max(f, 0), 1), true
}

func clampCount(u uint64) uint64 { return min(u, maxCount) }

func decodeStatus(b []byte) (*statusMsg, error) {
	m := &statusMsg{}
	s := &m.Status
	kvOK, lmOK := true, true
	var err error
	m.From, err = eachField(b, func(fl field) error {
		switch fl.num {
		case 3:
			m.Seq = fl.u
		case 4:
			m.Epoch = fl.u
		case 5:
			m.ResSeq = fl.u
		case 6:
			m.Count = fl.u
		case 7:
			m.Digest = fl.u
		case 8:
			if fl.u > uint64(StateDegraded) {
				return fmt.Errorf("%w: residency state %d", errMalformed, fl.u)
			}
			m.ResState = ResidencyState(fl.u)
		case 9:
			s.MetricsOK = fl.u != 0
		case 10:
			s.Running = clampCount(fl.u)
		case 11:
			s.Waiting = clampCount(fl.u)
		case 12:
			s.KVUsage, kvOK = clampFloat(fl.u)
		case 13:
			s.PrefixHits = fl.u
		case 14:
			s.PrefixQueries = fl.u
		case 15:
			s.BlockSize = int(clampCount(fl.u))
		case 16:
			s.MaxLoras = int(clampCount(fl.u))
		case 17:
			if len(fl.b) > maxStringLen || len(s.Adapters) >= maxAdapters {
				return fmt.Errorf("%w: adapter list", errMalformed)
			}
			s.Adapters = append(s.Adapters, string(fl.b))
		case 18:
			s.LMCacheKnown = fl.u != 0
		case 19:
			s.LMCacheOccupancy, lmOK = clampFloat(fl.u)
		case 20:
			s.LMCacheAvailable = fl.u != 0
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !kvOK {
		s.MetricsOK = false
	}
	if !lmOK {
		s.LMCacheKnown = false
	}
	return m, nil
}

func decodeResync(b []byte) (*resyncMsg, error) {
	m := &resyncMsg{}
	var missing []byte
	var err error
	m.From, err = eachField(b, func(fl field) error {
		switch fl.num {
		case 3:
			m.Epoch = fl.u
		case 4:
			m.HaveSeq = fl.u
		case 5:
			m.Full = fl.u != 0
		case 6:
			missing = fl.b
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	prev := m.HaveSeq
	for len(missing) > 0 {
		d, n := protowire.ConsumeVarint(missing)
		if n < 0 || d == 0 || len(m.Missing) >= maxMissing {
			return nil, fmt.Errorf("%w: missing sequence list", errMalformed)
		}
		prev += d
		m.Missing = append(m.Missing, prev)
		missing = missing[n:]
	}
	return m, nil
}
