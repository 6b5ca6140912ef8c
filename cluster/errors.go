package cluster

import (
	"errors"
	"fmt"
)

// Refusal says why Apply refused a task. Callers branch on it (errors.Is
// with the Err* values below): a stale shard report is expected and
// ignored, a NoLongerPrimary tells a primary it was replaced, the rest are
// bad input.
type Refusal uint8

const (
	// RefusedNotBootstrapped: a task before Bootstrap.
	RefusedNotBootstrapped Refusal = iota + 1
	// RefusedAlreadyBootstrapped: a second Bootstrap.
	RefusedAlreadyBootstrapped
	// RefusedNodeConflict: a node joins under a name or id another node
	// of the cluster has.
	RefusedNodeConflict
	// RefusedIndexExists: OpenSearch's ResourceAlreadyExistsException.
	RefusedIndexExists
	// RefusedIndexNotFound: OpenSearch's IndexNotFoundException.
	RefusedIndexNotFound
	// RefusedInvalid: a malformed task (IllegalArgumentException).
	RefusedInvalid
	// RefusedStale: a shard started or failed report, or a node left, that
	// no longer matches the state: the copy moved on, the node is gone.
	// OpenSearch answers these with success and no change; the caller may
	// ignore them.
	RefusedStale
	// RefusedNoLongerPrimary: a shard failed report from a primary whose
	// term is no longer the shard's (NoLongerPrimaryShardException).
	RefusedNoLongerPrimary
	// RefusedSplit: a split task the shard's state does not allow (a
	// split of it is running, it is not active on every copy, a child
	// copy is not in sync for the hand-off).
	RefusedSplit
)

var refusalNames = [...]string{
	RefusedNotBootstrapped:     "not bootstrapped",
	RefusedAlreadyBootstrapped: "already bootstrapped",
	RefusedNodeConflict:        "node conflict",
	RefusedIndexExists:         "index exists",
	RefusedIndexNotFound:       "index not found",
	RefusedInvalid:             "invalid",
	RefusedStale:               "stale",
	RefusedNoLongerPrimary:     "no longer primary",
	RefusedSplit:               "split refused",
}

func (r Refusal) String() string {
	if int(r) < len(refusalNames) && refusalNames[r] != "" {
		return refusalNames[r]
	}
	return fmt.Sprintf("Refusal(%d)", uint8(r))
}

// RefusedError is a task Apply refused; the state is unchanged. Message is
// OpenSearch's words where OpenSearch refuses the same thing (Exception
// names its class), so the REST layer can show it as is.
type RefusedError struct {
	Refusal   Refusal
	Exception string
	Message   string
}

func (e *RefusedError) Error() string { return e.Message }

// Is matches the Err* values by Refusal.
func (e *RefusedError) Is(target error) bool {
	t, ok := target.(*RefusedError)
	return ok && t.Message == "" && t.Refusal == e.Refusal
}

// Values for errors.Is, one per Refusal.
var (
	ErrNotBootstrapped     error = &RefusedError{Refusal: RefusedNotBootstrapped}
	ErrAlreadyBootstrapped error = &RefusedError{Refusal: RefusedAlreadyBootstrapped}
	ErrNodeConflict        error = &RefusedError{Refusal: RefusedNodeConflict}
	ErrIndexExists         error = &RefusedError{Refusal: RefusedIndexExists}
	ErrIndexNotFound       error = &RefusedError{Refusal: RefusedIndexNotFound}
	ErrInvalidTask         error = &RefusedError{Refusal: RefusedInvalid}
	ErrStale               error = &RefusedError{Refusal: RefusedStale}
	ErrNoLongerPrimary     error = &RefusedError{Refusal: RefusedNoLongerPrimary}
	ErrSplitRefused        error = &RefusedError{Refusal: RefusedSplit}
)

// ErrInvalidState marks a state that breaks an invariant (Validate). Apply
// checks the indices and nodes it changed and returns an error wrapping it
// instead of a broken state: a bug, never an answer to bad input.
var ErrInvalidState = errors.New("cluster: invalid state")

func refuse(r Refusal, exception, format string, args ...any) *RefusedError {
	return &RefusedError{Refusal: r, Exception: exception, Message: fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) *RefusedError {
	return refuse(RefusedInvalid, "IllegalArgumentException", format, args...)
}

func stale(format string, args ...any) *RefusedError {
	return refuse(RefusedStale, "", "cluster: stale: "+format, args...)
}
