package fireclaim

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Record is a claim or run record as the stores behind
// lockmw/internal/store keep it (etcd, ZooKeeper): a JSON document.
type Record struct {
	Fire  int64  `json:"fire"` // unix ms
	By    string `json:"by"`
	Token string `json:"token,omitempty"` // claim records only
}

// State is a claim record as a store read it: Exists is false when there
// is none; Version is the store's mark for its compare-and-set (a ZooKeeper
// node's data version, an etcd key's mod revision).
type State struct {
	Record  Record
	Version int64
	Exists  bool
}

// MaxClaimTries bounds the compare-and-sets of one Raise: each retry
// means another claim landed between the read and the write.
const MaxClaimTries = 16

// Raise is the claim loop of a store with a compare-and-set on one record
// (Claims.Claim's semantics): it raises job's record to fire at, claimed
// by instance under a new token, if the record holds an earlier fire or
// none. Each try calls read for the record's state, refuses the claim if
// the record holds at or a later fire (won all the same when the record
// carries this claim's token: its own write, whose reply was lost or which
// the client replayed), and otherwise calls set with the new record (val,
// JSON) and the state read: set writes it only if the record is still at
// that state, reporting true, or false when another write came first (or
// its outcome is unknown), and the loop reads again. Errors are wrapped
// with the job and fire.
func Raise(ctx context.Context, job string, at time.Time, instance string,
	read func(ctx context.Context) (State, error),
	set func(ctx context.Context, val []byte, cur State) (bool, error),
) (Claim, error) {
	token, err := NewToken()
	if err != nil {
		return Claim{}, err
	}
	ms := at.UnixMilli()
	val, err := json.Marshal(Record{Fire: ms, By: instance, Token: token})
	if err != nil {
		return Claim{}, err
	}
	for range MaxClaimTries {
		cur, err := read(ctx)
		if err != nil {
			return Claim{}, ClaimError(job, at, err)
		}
		prev := Claim{By: cur.Record.By}
		if cur.Exists {
			prev.Fire = time.UnixMilli(cur.Record.Fire)
			if cur.Record.Fire >= ms {
				prev.Won = cur.Record.Token == token // this claim's own write, read back
				return prev, nil
			}
		}
		won, err := set(ctx, val, cur)
		if err != nil {
			return Claim{}, ClaimError(job, at, err)
		}
		if won {
			prev.Won = true
			return prev, nil
		}
	}
	return Claim{}, ClaimError(job, at, errors.New("the record kept changing under the claim"))
}
