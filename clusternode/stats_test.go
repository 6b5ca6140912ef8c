package clusternode

import (
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/replication"
)

// TestAStaleRetryCountsOnlyAWriteRoutedToAnotherShardAfterARefusal: a
// write refused and sent again to the same shard (a primary failing over)
// is no stale retry; one refused and routed to another shard (a child,
// after the parent's hand-off) is, waiting from its first refusal.
func TestAStaleRetryCountsOnlyAWriteRoutedToAnotherShardAfterARefusal(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var s nodeStats
	var same staleRetry
	same.routedTo(0)
	same.refusedBy(0, t0)
	same.routedTo(0)
	s.answered(&same, t0.Add(time.Second))
	if got := s.staleRetries.Load(); got != 0 {
		t.Fatalf("a write retried on its own shard counted %d stale retries, want 0", got)
	}
	var moved staleRetry
	moved.routedTo(0)
	moved.refusedBy(0, t0)
	moved.routedTo(0)
	moved.refusedBy(0, t0.Add(100*time.Millisecond)) // the first refusal is when the wait began
	moved.routedTo(3)
	s.answered(&moved, t0.Add(250*time.Millisecond))
	var never staleRetry
	never.routedTo(3)
	s.answered(&never, t0.Add(time.Hour))
	if got, wait, maxWait := s.staleRetries.Load(), time.Duration(s.staleWaitTotal.Load()), time.Duration(s.staleWaitMax.Load()); got != 1 || wait != 250*time.Millisecond || maxWait != wait {
		t.Fatalf("stale retries %d, waited %v (max %v); want 1, 250ms, 250ms", got, wait, maxWait)
	}
}

// TestSentCountsRecoveryChunksApartFromOtherMessages: every message sent
// counts toward the transport's totals, and a recovery's file chunks also
// toward the bytes peer recoveries copied.
func TestSentCountsRecoveryChunksApartFromOtherMessages(t *testing.T) {
	var s nodeStats
	s.sent(replication.KindRecoveryChunk, 1000)
	s.sent(replication.KindRecoveryManifest, 10)
	s.sent("write", 7)
	if s.messages.Load() != 3 || s.messageBytes.Load() != 1017 || s.recoveryChunks.Load() != 1 || s.recoveryBytes.Load() != 1000 {
		t.Fatalf("messages %d (%d bytes), recovery chunks %d (%d bytes); want 3 (1017), 1 (1000)",
			s.messages.Load(), s.messageBytes.Load(), s.recoveryChunks.Load(), s.recoveryBytes.Load())
	}
}
