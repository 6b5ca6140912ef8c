package storage

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/routing"
)

// ApplyLog's entries come from a log in key order, one per sequence
// number; a batch out of order would leave a document at an older state
// (the later write of "a" applied first, the earlier one over it). It is
// refused: an assertion, which panics under -tags invariants.
func TestApplyLogRefusesEntriesOutOfOrder(t *testing.T) {
	e := openEngine(t, Options{})
	defer e.Close()
	s := openShard(t, e, 0, 0, routing.Span{Start: 0, End: 64})
	entry := func(seq uint64, v string) LogEntry {
		return LogEntry{Seq: seq, Op: Op{Kind: OpIndex, Key: 1, ID: "a", Source: []byte(v)}}
	}
	apply := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		return s.ApplyLog([]LogEntry{entry(8, "new"), entry(7, "old")})
	}
	err := apply()
	if err == nil || !strings.Contains(err.Error(), "sequence number 7 after 8") {
		d, ok, _ := s.Get(0, 1, "a")
		t.Fatalf("ApplyLog of entries 8, 7 = %v; document a = %q (found %v)", err, d.Source, ok)
	}
	if _, ok, _ := s.Get(0, 1, "a"); ok {
		t.Errorf("a refused batch left document a behind")
	}
	t.Logf("refused: %v", err)
}
