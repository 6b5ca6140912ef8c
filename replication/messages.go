package replication

import (
	"encoding/json"
	"fmt"

	"github.com/shardsplit/shardsplit/transport"
)

// RecoveryStart is a target's request for a peer recovery.
type RecoveryStart = recoveryStart

// addressee is what every replication and recovery message names: the
// shard, and the copy or recovery it is for.
type addressee struct {
	Shard  ShardKey `json:"shard"`
	Target string   `json:"target,omitempty"`
	ID     string   `json:"id,omitempty"`
}

func peek(m transport.Message) (addressee, error) {
	var a addressee
	// Loose on purpose: every kind has these fields and more.
	if err := json.Unmarshal(m.Body, &a); err != nil {
		return a, fmt.Errorf("replication: %s from %s: %w", m.Kind, m.From, err)
	}
	return a, nil
}

// Addressee returns the shard a replication message is for and, for a
// primary's request, the allocation id of the copy it is meant for.
func Addressee(m transport.Message) (ShardKey, string, error) {
	a, err := peek(m)
	return a.Shard, a.Target, err
}

// RecoveryID returns the recovery a recovery message belongs to.
func RecoveryID(m transport.Message) (string, error) {
	a, err := peek(m)
	return a.ID, err
}

// Handle takes a replication message addressed to this copy.
func (c *Copy) Handle(m transport.Message) error {
	switch m.Kind {
	case KindReplicate:
		var r replicateRequest
		if err := m.Decode(&r); err != nil {
			return err
		}
		c.OnReplicate(m.From, r)
	case KindResponse:
		var r replicateResponse
		if err := m.Decode(&r); err != nil {
			return err
		}
		c.OnResponse(r)
	default:
		return fmt.Errorf("replication: unknown message kind %q", m.Kind)
	}
	return nil
}

// Handle takes a target's message about this recovery.
func (s *Source) Handle(m transport.Message) error {
	switch m.Kind {
	case KindRecoveryAck:
		var a recoveryAck
		if err := m.Decode(&a); err != nil {
			return err
		}
		s.OnAck(a)
	case KindRecoveryOpened:
		var o recoveryOpened
		if err := m.Decode(&o); err != nil {
			return err
		}
		s.OnOpened(o)
	default:
		return fmt.Errorf("replication: unknown message kind %q", m.Kind)
	}
	return nil
}

// Handle takes the source's manifest or a chunk.
func (t *Target) Handle(m transport.Message) error {
	switch m.Kind {
	case KindRecoveryManifest:
		var r recoveryManifest
		if err := m.Decode(&r); err != nil {
			return err
		}
		return t.OnManifest(r)
	case KindRecoveryChunk:
		var r recoveryChunk
		if err := m.Decode(&r); err != nil {
			return err
		}
		return t.OnChunk(r)
	}
	return fmt.Errorf("replication: unknown message kind %q", m.Kind)
}

// Target returns the allocation id the recovery builds.
func (s *Source) Target() string { return s.target }
