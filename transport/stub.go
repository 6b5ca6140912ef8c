// Package transport: a stand-in with the agreed API, replaced by the real
// package when its branch lands.
package transport

import (
	"bytes"
	"encoding/json"
	"fmt"
)

type Message struct {
	From string          `json:"from"`
	To   string          `json:"to"`
	Kind string          `json:"kind"`
	Body json.RawMessage `json:"body,omitempty"`
}

func NewMessage(from, to, kind string, body any) (Message, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return Message{}, fmt.Errorf("transport: encode %s: %w", kind, err)
	}
	return Message{From: from, To: to, Kind: kind, Body: b}, nil
}

func (m Message) Decode(v any) error {
	d := json.NewDecoder(bytes.NewReader(m.Body))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("transport: decode %s: %w", m.Kind, err)
	}
	return nil
}

type Transport interface{ Send(m Message) }
