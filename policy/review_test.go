package policy

import (
	"math"
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/routing"
)

// TestReviewPolicyValidateRejectsInfiniteSplitRate: an infinite split
// threshold is not a threshold. Validate let +Inf through, and with it no
// leaf is ever split by load while the merge limit (a fraction of +Inf) is
// +Inf too, so every covered pair of adjacent leaves merges, however hot.
func TestReviewPolicyValidateRejectsInfiniteSplitRate(t *testing.T) {
	th := testThresholds()
	th.SplitWritesPerSec = math.Inf(1)
	err := th.Validate()
	if err == nil {
		// What the policy then does: it merges two leaves taking a
		// million writes/s each.
		in := Input{Now: now, Table: table(t, routing.ModePartition, split(0, 2)), Shards: map[routing.ShardID]ShardStats{
			2: load{from: t0, rate: 1e6}.stats(), 3: load{from: t0, rate: 1e6}.stats()}}
		t.Fatalf("Validate accepted split threshold %v; Decide then says %v", th.SplitWritesPerSec, Decide(in, th).Action)
	}
	if !strings.Contains(err.Error(), "+Inf") {
		t.Fatalf("the error does not name the bad value: %v", err)
	}
}
