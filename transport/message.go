package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Message is one message between two nodes. Body is the JSON of a value
// whose type Kind names.
type Message struct {
	From string          `json:"from"`
	To   string          `json:"to"`
	Kind string          `json:"kind"`
	Body json.RawMessage `json:"body,omitempty"`
}

// Transport sends best-effort one-way messages: Send never blocks on the
// network and may lose, delay, reorder or duplicate a message; protocols
// above retry what they need.
//
// Send stamps m.From with the sending node's name (a message cannot claim
// another sender) and copies m.Body, so the caller may reuse its buffer.
type Transport interface {
	Send(m Message)
}

// NewMessage returns the message of kind from one node to another whose
// Body is the JSON of body (no Body if body is nil). It refuses an empty
// name or kind.
func NewMessage(from, to, kind string, body any) (Message, error) {
	m := Message{From: from, To: to, Kind: kind}
	switch {
	case from == "":
		return Message{}, fmt.Errorf("transport: %q message to %q: empty sender name", kind, to)
	case to == "":
		return Message{}, fmt.Errorf("transport: %q message from %q: empty recipient name", kind, from)
	case kind == "":
		return Message{}, fmt.Errorf("transport: message from %q to %q: empty kind", from, to)
	}
	if body == nil {
		return m, nil
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return Message{}, fmt.Errorf("transport: encode %q message body: %w", kind, err)
	}
	m.Body = raw
	return m, nil
}

// DecodeError is a message body that does not decode into the value its
// kind names: malformed JSON, an unknown field, trailing data, or no body.
type DecodeError struct {
	Kind string
	From string
	Err  error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("transport: decode %q message from %q: %v", e.Kind, e.From, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// errNoBody is DecodeError.Err for a message sent without a body.
var errNoBody = errors.New("the message has no body")

// Decode decodes the body into v strictly: an unknown field, trailing data
// after the value or a missing body is a *DecodeError naming the kind, so
// that two nodes that disagree on a message's shape fail loudly rather
// than drop a field.
func (m Message) Decode(v any) error {
	if len(m.Body) == 0 {
		return &DecodeError{Kind: m.Kind, From: m.From, Err: errNoBody}
	}
	dec := json.NewDecoder(bytes.NewReader(m.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &DecodeError{Kind: m.Kind, From: m.From, Err: err}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &DecodeError{Kind: m.Kind, From: m.From, Err: fmt.Errorf("data after the value at offset %d", dec.InputOffset())}
	}
	return nil
}

// clone returns m with its own copy of Body.
func (m Message) clone() Message {
	m.Body = bytes.Clone(m.Body)
	return m
}
