package mesh

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// Role is what a pool member does.
type Role uint8

// Roles in the pool.
const (
	RoleRouter  Role = 1
	RoleSidecar Role = 2
)

func (r Role) String() string {
	switch r {
	case RoleRouter:
		return "router"
	case RoleSidecar:
		return "sidecar"
	}
	return "unknown"
}

// MetaLimit is memberlist's node meta budget; encoded meta stays below it.
const MetaLimit = 512

// metaFormat leads encoded meta, like the type byte of a message.
const metaFormat byte = 0x4d // 'M'

// ErrMetaTooLarge is returned when the fixed part of a node's meta does not
// fit MetaLimit even with every optional model dropped.
var ErrMetaTooLarge = errors.New("mesh: node meta exceeds 512 bytes")

// Meta is what a member announces about itself with its membership.
type Meta struct {
	Role      Role
	NodeID    string
	EngineURL string   // sidecars: the engine's base URL, as routes name it
	Models    []string // sidecars: models the engine serves
	Build     string
	ProtoMin  uint32
	ProtoMax  uint32
	// Routers: the Raft address (host:port) other routers dial, and the
	// admin API address (host:port) telemetry is pushed to. An unspecified
	// host (0.0.0.0) means "my gossip address's host".
	RaftAddr  string
	AdminAddr string

	// keyID names the certificate this member signs under (see Identity);
	// empty when it has none. session is drawn at each start of a member
	// with identity; the pair keys are bound to it (see pairKey).
	keyID   []byte
	session uint64
}

// NormalizeURL is the form of an engine URL the view is keyed by: scheme
// and host lower-cased, no trailing slash. Route targets and sidecar
// announcements must go through it to match.
func NormalizeURL(raw string) string {
	raw = strings.TrimSpace(raw)
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return strings.TrimRight(raw, "/")
	}
	u.Scheme = strings.ToLower(u.Scheme)
	u.Host = strings.ToLower(u.Host)
	u.Path = strings.TrimRight(u.Path, "/")
	return u.String()
}

// encodeMeta encodes m under MetaLimit, dropping models that do not fit.
func encodeMeta(m *Meta) ([]byte, error) {
	if len(m.NodeID) > 64 || len(m.Build) > 64 || len(m.EngineURL) > maxStringLen ||
		len(m.RaftAddr) > 128 || len(m.AdminAddr) > 128 {
		return nil, fmt.Errorf("%w: node id, build, engine URL or an address too long", ErrMetaTooLarge)
	}
	b := []byte{metaFormat}
	b = appendUint(b, 1, uint64(m.Role))
	b = appendString(b, 2, m.NodeID)
	b = appendString(b, 3, m.EngineURL)
	b = appendString(b, 5, m.Build)
	b = appendUint(b, 6, uint64(m.ProtoMin))
	b = appendUint(b, 7, uint64(m.ProtoMax))
	b = appendString(b, 8, m.RaftAddr)
	b = appendString(b, 9, m.AdminAddr)
	if len(m.keyID) > 0 {
		b = protowire.AppendTag(b, 10, protowire.BytesType)
		b = protowire.AppendBytes(b, m.keyID)
	}
	if m.session != 0 {
		b = protowire.AppendTag(b, 11, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, m.session)
	}
	if len(b) >= MetaLimit {
		return nil, ErrMetaTooLarge
	}
	for _, model := range m.Models {
		if len(model) > 128 {
			continue
		}
		next := appendString(b, 4, model)
		if len(next) >= MetaLimit {
			break
		}
		b = next
	}
	return b, nil
}

func decodeMeta(b []byte) (Meta, error) {
	var m Meta
	if len(b) == 0 || b[0] != metaFormat || len(b) > MetaLimit {
		return m, fmt.Errorf("%w: node meta", errMalformed)
	}
	err := eachSub(b[1:], func(fl field) error {
		var err error
		switch fl.num {
		case 1:
			m.Role = Role(fl.u)
		case 2:
			m.NodeID, err = boundedString(fl.b)
		case 3:
			var s string
			s, err = boundedString(fl.b)
			m.EngineURL = NormalizeURL(s)
		case 4:
			var s string
			s, err = boundedString(fl.b)
			if len(m.Models) < 16 && s != "" {
				m.Models = append(m.Models, s)
			}
		case 5:
			m.Build, err = boundedString(fl.b)
		case 6:
			m.ProtoMin = uint32(min(fl.u, 1<<16))
		case 7:
			m.ProtoMax = uint32(min(fl.u, 1<<16))
		case 8:
			m.RaftAddr, err = boundedString(fl.b)
		case 9:
			m.AdminAddr, err = boundedString(fl.b)
		case 10:
			if len(fl.b) != keyIDLen {
				return fmt.Errorf("%w: key id of %d bytes", errMalformed, len(fl.b))
			}
			m.keyID = bytes.Clone(fl.b)
		case 11:
			m.session = fl.u
		}
		return err
	})
	if err != nil {
		return Meta{}, err
	}
	if m.Role != RoleRouter && m.Role != RoleSidecar {
		return Meta{}, fmt.Errorf("%w: role %d", errMalformed, m.Role)
	}
	return m, nil
}
