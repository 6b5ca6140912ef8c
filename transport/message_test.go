package transport

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type ping struct {
	Term int    `json:"term"`
	Note string `json:"note,omitempty"`
}

func TestMessageBodyRoundTrips(t *testing.T) {
	m, err := NewMessage("n1", "n2", "ping", ping{Term: 3, Note: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	var got ping
	if err := m.Decode(&got); err != nil {
		t.Fatalf("Decode(%s) = %v", m.Body, err)
	}
	if diff := cmp.Diff(ping{Term: 3, Note: "hi"}, got); diff != "" {
		t.Errorf("Decode(%s) (-want +got):\n%s", m.Body, diff)
	}
	// The envelope round-trips through JSON as the HTTP transport sends it.
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back Message
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m, back); diff != "" {
		t.Errorf("envelope round trip (-want +got):\n%s", diff)
	}
}

func TestNewMessageWithoutBodyHasNone(t *testing.T) {
	m, err := NewMessage("n1", "n2", "heartbeat", nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Body != nil {
		t.Errorf("NewMessage(nil body).Body = %s, want none", m.Body)
	}
}

func TestNewMessageRefusesEmptyNames(t *testing.T) {
	for _, c := range []struct{ name, from, to, kind string }{
		{"no sender", "", "n2", "ping"},
		{"no recipient", "n1", "", "ping"},
		{"no kind", "n1", "n2", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := NewMessage(c.from, c.to, c.kind, ping{}); err == nil {
				t.Errorf("NewMessage(%q, %q, %q) = nil error, want one", c.from, c.to, c.kind)
			}
		})
	}
	if _, err := NewMessage("n1", "n2", "ping", func() {}); err == nil {
		t.Error("NewMessage(a func body) = nil error, want an encoding error")
	}
}

func TestDecodeIsStrict(t *testing.T) {
	for _, c := range []struct {
		name string
		body string
	}{
		{"unknown field", `{"term":1,"termm":2}`},
		{"trailing data", `{"term":1} {"term":2}`},
		{"trailing garbage", `{"term":1}}`},
		{"wrong type", `{"term":"one"}`},
		{"no body", ``},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := Message{From: "n1", To: "n2", Kind: "ping", Body: json.RawMessage(c.body)}
			var v ping
			err := m.Decode(&v)
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode(%q) = %v, want a *DecodeError", c.body, err)
			}
			if de.Kind != "ping" || de.From != "n1" {
				t.Errorf("Decode(%q) error names kind %q from %q, want \"ping\" from \"n1\"", c.body, de.Kind, de.From)
			}
		})
	}
}
