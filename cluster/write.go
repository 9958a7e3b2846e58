package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/cluster/raftstore"
	"github.com/rolter/rolter/config"
)

// This file is the Store's write API: one method per operation, taking
// the state types (config.Provider, APIKey, ...) and returning a refusal
// as a typed error. The protobuf commands are built here and nowhere
// outside the package.

// Author is who makes a write. The FSM resolves TokenSHA256 to the
// token's role and refuses a write whose role is too weak.
type Author struct {
	// Name is the actor recorded in the audit log (the token's name).
	Name string
	// TokenSHA256 is the hex SHA-256 of the admin token (HashToken).
	TokenSHA256 string
	// IdempotencyKey makes a client's retry apply once and answer what
	// the first attempt answered; empty: the Store draws one, so only its
	// own retries through an election are deduplicated.
	IdempotencyKey string
	// Time stamps the write in the audit log (zero: StoreConfig.Now).
	Time time.Time
}

// Written is what an accepted write reports.
type Written struct {
	// ConfigVersion is the config_version after the write.
	ConfigVersion uint64
	// Replayed: the idempotency key had been used, and this is the
	// original answer; nothing was applied now.
	Replayed bool
}

// Code says why the state machine refused a write. A Code is an error,
// so errors.Is(err, ErrNotFound) matches every refusal of that kind, and
// it is what travels from the leader to the router that forwarded the
// write: a code, never a message to compare. Its string is the code
// admin API clients see ("not_found", ...).
type Code string

// The refusals of the state machine. A leader newer than this router may
// send a code not listed here; it still arrives as a Code.
const (
	// ErrForbidden: the token's role is below the one the write needs.
	ErrForbidden Code = "forbidden"
	// ErrUnknownToken: no admin token has the author's SHA-256.
	ErrUnknownToken Code = "unauthenticated"
	// ErrNotFound: the entry to update or delete does not exist.
	ErrNotFound Code = "not_found"
	// ErrConflict: the write clashes with the state (the name exists, a
	// route still uses the provider, the file moved on).
	ErrConflict Code = "conflict"
	// ErrReadOnly: the entry is owned by rolter.toml.
	ErrReadOnly Code = "readonly"
	// ErrInvalid: the entry itself is not valid.
	ErrInvalid Code = "invalid"
)

func (c Code) Error() string { return "cluster: write refused: " + string(c) }

// RefusedError is a write the state machine turned down: its Code and
// the reason for the person who asked.
type RefusedError struct {
	Code    Code
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("cluster: write refused (%s): %s", e.Code, e.Message)
}

// Unwrap returns the Code, for errors.Is.
func (e *RefusedError) Unwrap() error { return e.Code }

// codeFromPB maps the wire code to a Code. Every enum value maps, known
// here or not: CODE_NOT_FOUND is "not_found".
func codeFromPB(c raftstore.Code) Code {
	return Code(strings.TrimPrefix(strings.ToLower(c.String()), "code_"))
}

// write signs cmd as by, commits it and turns a refusal into a
// *RefusedError.
func (s *Store) write(ctx context.Context, by Author, cmd *raftstore.Command) (Written, error) {
	cmd.Actor, cmd.ActorTokenSha256, cmd.IdempotencyKey = by.Name, by.TokenSHA256, by.IdempotencyKey
	if !by.Time.IsZero() {
		cmd.TimeUnixNano = by.Time.UnixNano()
	}
	res, err := s.Apply(ctx, cmd)
	if err != nil {
		return Written{}, err
	}
	if res.GetCode() != raftstore.Code_CODE_OK {
		return Written{}, &RefusedError{Code: codeFromPB(res.GetCode()), Message: res.GetMessage()}
	}
	return Written{ConfigVersion: res.GetConfigVersion(), Replayed: res.GetReplayed()}, nil
}

func (s *Store) provider(ctx context.Context, by Author, op raftstore.Op, p config.Provider) (Written, error) {
	return s.write(ctx, by, &raftstore.Command{Op: op, Payload: &raftstore.Command_Provider{Provider: providerToPB(p)}})
}

func (s *Store) deleteNamed(ctx context.Context, by Author, op raftstore.Op, name string) (Written, error) {
	return s.write(ctx, by, &raftstore.Command{Op: op, Payload: &raftstore.Command_Name{Name: name}})
}

// CreateProvider adds a provider (ErrConflict when the name is taken).
func (s *Store) CreateProvider(ctx context.Context, by Author, p config.Provider) (Written, error) {
	return s.provider(ctx, by, raftstore.Op_OP_CREATE_PROVIDER, p)
}

// UpdateProvider replaces the provider named p.Name.
func (s *Store) UpdateProvider(ctx context.Context, by Author, p config.Provider) (Written, error) {
	return s.provider(ctx, by, raftstore.Op_OP_UPDATE_PROVIDER, p)
}

// DeleteProvider removes a provider no route or group uses.
func (s *Store) DeleteProvider(ctx context.Context, by Author, name string) (Written, error) {
	return s.deleteNamed(ctx, by, raftstore.Op_OP_DELETE_PROVIDER, name)
}

// CreateRoute adds the route for r.Model.
func (s *Store) CreateRoute(ctx context.Context, by Author, r config.Route) (Written, error) {
	return s.write(ctx, by, &raftstore.Command{Op: raftstore.Op_OP_CREATE_ROUTE, Payload: &raftstore.Command_Route{Route: routeToPB(r)}})
}

// UpdateRoute replaces the route for r.Model.
func (s *Store) UpdateRoute(ctx context.Context, by Author, r config.Route) (Written, error) {
	return s.write(ctx, by, &raftstore.Command{Op: raftstore.Op_OP_UPDATE_ROUTE, Payload: &raftstore.Command_Route{Route: routeToPB(r)}})
}

// DeleteRoute removes the route for model.
func (s *Store) DeleteRoute(ctx context.Context, by Author, model string) (Written, error) {
	return s.deleteNamed(ctx, by, raftstore.Op_OP_DELETE_ROUTE, model)
}

// CreateGroup adds a provider group.
func (s *Store) CreateGroup(ctx context.Context, by Author, g config.ProviderGroup) (Written, error) {
	return s.write(ctx, by, &raftstore.Command{Op: raftstore.Op_OP_CREATE_GROUP, Payload: &raftstore.Command_Group{Group: groupToPB(g)}})
}

// UpdateGroup replaces the provider group named g.Name.
func (s *Store) UpdateGroup(ctx context.Context, by Author, g config.ProviderGroup) (Written, error) {
	return s.write(ctx, by, &raftstore.Command{Op: raftstore.Op_OP_UPDATE_GROUP, Payload: &raftstore.Command_Group{Group: groupToPB(g)}})
}

// DeleteGroup removes a provider group.
func (s *Store) DeleteGroup(ctx context.Context, by Author, name string) (Written, error) {
	return s.deleteNamed(ctx, by, raftstore.Op_OP_DELETE_GROUP, name)
}

// CreateKey adds an API key (k.SHA256 is the hash of its secret).
func (s *Store) CreateKey(ctx context.Context, by Author, k APIKey) (Written, error) {
	return s.write(ctx, by, &raftstore.Command{Op: raftstore.Op_OP_CREATE_KEY, Payload: &raftstore.Command_Key{Key: keyToPB(k)}})
}

// DeleteKey removes the API key named name.
func (s *Store) DeleteKey(ctx context.Context, by Author, name string) (Written, error) {
	return s.deleteNamed(ctx, by, raftstore.Op_OP_DELETE_KEY, name)
}

// CreateToken adds an admin token (superadmin only).
func (s *Store) CreateToken(ctx context.Context, by Author, t AdminToken) (Written, error) {
	return s.write(ctx, by, &raftstore.Command{Op: raftstore.Op_OP_CREATE_TOKEN, Payload: &raftstore.Command_Token{Token: tokenToPB(t)}})
}

// DeleteToken removes the admin token named name (superadmin only).
func (s *Store) DeleteToken(ctx context.Context, by Author, name string) (Written, error) {
	return s.deleteNamed(ctx, by, raftstore.Op_OP_DELETE_TOKEN, name)
}

// SetPolicy replaces the adaptive routing policy (superadmin only).
func (s *Store) SetPolicy(ctx context.Context, by Author, p adaptive.Policy) (Written, error) {
	return s.write(ctx, by, &raftstore.Command{Op: raftstore.Op_OP_SET_POLICY, Payload: &raftstore.Command_Policy{Policy: policyToPB(p)}})
}

// SetModelPrice adds or replaces a model's catalog price.
func (s *Store) SetModelPrice(ctx context.Context, by Author, m config.ModelPrice) (Written, error) {
	return s.write(ctx, by, &raftstore.Command{Op: raftstore.Op_OP_SET_MODEL_PRICE,
		Payload: &raftstore.Command_ModelPrice{ModelPrice: modelPriceToPB(m)}})
}

// DeleteModelPrice removes a model's catalog price.
func (s *Store) DeleteModelPrice(ctx context.Context, by Author, model string) (Written, error) {
	return s.deleteNamed(ctx, by, raftstore.Op_OP_DELETE_MODEL_PRICE, model)
}

// SyncFile brings the file-owned entries to what c declares, as the
// package-level SyncFile does, sent as from.
func (s *Store) SyncFile(ctx context.Context, c *config.Config, from FileSender) (FileSyncResult, error) {
	return SyncFile(ctx, s, c, from)
}
