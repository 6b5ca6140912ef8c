package transport

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// BenchmarkHTTPSend measures messages per second from one HTTP transport
// to another on loopback, with 200-byte bodies, counted at the receiver's
// Deliver. The sender keeps at most a window of messages in flight (half
// the queue bound), as a protocol with flow control does, so none is
// dropped: the figure is delivered throughput, not the rate of Send.
func BenchmarkHTTPSend(b *testing.B) {
	const window = DefaultQueueMessages / 2
	credits := make(chan struct{}, window)
	src, _ := startHTTP(b, "a", nil)
	dst, err := NewHTTP(HTTPConfig{Name: "b", Listen: "127.0.0.1:0", Deliver: func(ms []Message) {
		for range ms {
			<-credits
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer dst.Close()
	src.SetPeer("b", dst.Addr())
	body, _ := json.Marshal(map[string]string{"pad": strings.Repeat("x", 200-len(`{"pad":""}`))})
	if len(body) != 200 {
		b.Fatalf("body is %d bytes, want 200", len(body))
	}
	m := Message{From: "a", To: "b", Kind: "append", Body: body}

	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	start := time.Now()
	for b.Loop() {
		credits <- struct{}{}
		src.Send(m)
	}
	// Wait for the window to drain: every message delivered.
	deadline := time.After(30 * time.Second)
	for range window {
		select {
		case credits <- struct{}{}:
		case <-deadline:
			b.Fatalf("messages not delivered after 30 s: %+v", src.Stats().Peers["b"])
		}
	}
	elapsed := time.Since(start)
	if st := src.Stats().Peers["b"]; st.Dropped != 0 {
		b.Fatalf("dropped %d messages: %+v", st.Dropped, st)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}
