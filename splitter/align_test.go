package splitter

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/storage"
)

// Run with AlignFlush waits for the parent's own flush before the split
// begins, reports the wait, and past the bound splits anyway, its
// children from the parent's last flushed state.
func TestRunAlignsWithTheParentsOwnFlush(t *testing.T) {
	n := openNode(t, storage.Options{}, nil, 40) // 40 small documents: nothing to flush
	r, err := NewDriver(n, Config{AlignFlush: time.Second}).Run(SplitPlan(0, 2))
	if err != nil || r.Phase != PhaseDone {
		t.Fatalf("split: %v, phase %s (%v)", err, r.Phase, r.Err)
	}
	if !r.Aligned || r.AlignWait > 500*time.Millisecond {
		t.Errorf("a parent with almost nothing unflushed: waited %v, aligned %v; want at once", r.AlignWait, r.Aligned)
	}

	n = openNode(t, storage.Options{}, nil, 40)
	router := node.NewRouter(n, n.Table(), node.RouterConfig{})
	doc := []byte(strings.Repeat("x", 1024))
	for i := range 3000 { // ~3 MiB unflushed and no writer to fill the memtable
		if _, err := router.Index(fmt.Sprintf("big%d", i), "", doc); err != nil {
			t.Fatal(err)
		}
	}
	const bound = 100 * time.Millisecond
	r, err = NewDriver(n, Config{AlignFlush: bound}).Run(SplitPlan(0, 2))
	if err != nil || r.Phase != PhaseDone {
		t.Fatalf("split after the bound: %v, phase %s (%v)", err, r.Phase, r.Err)
	}
	if r.Aligned || r.AlignWait < bound {
		t.Errorf("~3 MiB unflushed and no writes: waited %v, aligned %v; want the whole %v, not aligned", r.AlignWait, r.Aligned, bound)
	}
	if len(r.ChildStats) == 0 || r.ChildStats[0].Flush != 0 || !r.ChildStats[0].Unflushed {
		t.Errorf("past the bound the children should come from the parent's flushed state, unflushed: %+v", r.ChildStats)
	}
}
