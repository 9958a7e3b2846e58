package e2e

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// AdminModel accepts the histories a linearizable store can produce and
// flags the ones it cannot: an acknowledged write lost, a write applied
// twice, a read of a value never written.
func TestAdminModelFlagsWhatALinearizableStoreCannotDo(t *testing.T) {
	op := func(client int, call, ret int64, kind, value, status, read string) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Call: call, Return: ret,
			Input: AdminInput{Kind: kind, Name: "p", Value: value}, Output: AdminOutput{Status: status, Value: read}}
	}
	unknown := func(client int, call int64, kind, value string) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Call: call, Return: 1 << 40,
			Input: AdminInput{Kind: kind, Name: "p", Value: value}, Output: AdminOutput{Unknown: true}}
	}
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"create, update, read", []porcupine.Operation{
			op(0, 0, 1, "create", "a", "ok", ""), op(1, 2, 3, "update", "b", "ok", ""), op(2, 4, 5, "read", "", "ok", "b")}, porcupine.Ok},
		{"concurrent creates: one wins", []porcupine.Operation{
			op(0, 0, 3, "create", "a", "ok", ""), op(1, 1, 2, "create", "b", "exists", ""), op(2, 4, 5, "read", "", "ok", "a")}, porcupine.Ok},
		{"an acknowledged create lost", []porcupine.Operation{
			op(0, 0, 1, "create", "a", "ok", ""), op(2, 2, 3, "read", "", "absent", "")}, porcupine.Illegal},
		{"a create applied twice answers exists to itself", []porcupine.Operation{
			op(0, 0, 1, "create", "a", "exists", ""), op(2, 2, 3, "read", "", "ok", "a")}, porcupine.Illegal},
		{"a delete seen before its create", []porcupine.Operation{
			op(0, 0, 1, "delete", "", "ok", ""), op(1, 2, 3, "create", "a", "ok", "")}, porcupine.Illegal},
		{"an unknown write may have happened", []porcupine.Operation{
			unknown(0, 0, "create", "a"), op(2, 2, 3, "read", "", "ok", "a")}, porcupine.Ok},
		{"or not", []porcupine.Operation{
			unknown(0, 0, "create", "a"), op(2, 2, 3, "read", "", "absent", "")}, porcupine.Ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperationsTimeout(AdminModel(), tc.ops, 0); got != tc.want {
				t.Fatalf("porcupine: %s, want %s", got, tc.want)
			}
		})
	}
}
