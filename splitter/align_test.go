package splitter

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
)

// Run with AlignFlush holds the parent's log and waits for its own flush
// past the hold before the split begins: the split then forces no flush,
// and every acknowledged write is there after it. An idle parent is not
// waited for (it would never flush on its own); its split flushes it as
// before.
func TestRunAlignsWithTheParentsOwnFlush(t *testing.T) {
	n := openHoldNode(t, vfs.NewMem()) // 40 small documents and no writer
	r, err := NewDriver(n, Config{AlignFlush: 10 * time.Second}).Run(Plan{Parent: 0, Ways: 2})
	if err != nil || r.Phase != PhaseDone {
		t.Fatalf("split: %v, phase %s (%v)", err, r.Phase, r.Err)
	}
	if r.Aligned || r.AlignWait > time.Second {
		t.Errorf("an idle parent: waited %v, aligned %v; want a short wait, not aligned", r.AlignWait, r.Aligned)
	}
	if len(r.ChildStats) == 0 || r.ChildStats[0].Flush == 0 || r.ChildStats[0].OwnFlush {
		t.Errorf("the split of an idle parent should flush it as before: %+v", r.ChildStats)
	}

	n = openHoldNode(t, vfs.NewMem())
	router := node.NewRouter(n, n.Table(), node.RouterConfig{})
	doc := []byte(strings.Repeat("x", 4096))
	stop, done := make(chan struct{}), make(chan []string, 1)
	go func() { // fills the memtable on a memory filesystem in about a second
		var acked []string
		defer func() { done <- acked }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("w%d", i)
			if _, err := router.Index(id, "", doc); err != nil {
				t.Errorf("write %s: %v", id, err)
				return
			}
			acked = append(acked, id)
			if i%8 == 7 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	r, err = NewDriver(n, Config{AlignFlush: 30 * time.Second}).Run(Plan{Parent: 0, Ways: 2})
	close(stop)
	acked := <-done
	if err != nil || r.Phase != PhaseDone {
		t.Fatalf("split under writes: %v, phase %s (%v)", err, r.Phase, r.Err)
	}
	if !r.Aligned {
		t.Errorf("under writes that fill the memtable: waited %v, not aligned", r.AlignWait)
	}
	for _, c := range r.ChildStats {
		if c.Flush != 0 || !c.OwnFlush {
			t.Errorf("child %d after an aligned wait: flush %v, own flush %v; want no forced flush", c.Shard, c.Flush, c.OwnFlush)
		}
	}
	missing := 0
	for _, id := range acked {
		if _, ok, err := router.Get(id, ""); err != nil || !ok {
			missing++
		}
	}
	if missing > 0 || len(acked) == 0 {
		t.Errorf("%d of %d acknowledged writes not found after the split", missing, len(acked))
	}
}
