package baseline

import (
	"errors"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/routing"
)

// An index created under a resize's target name while the resize builds
// it: OpenSearch creates the target in the cluster state before copying,
// so the second index of that name is refused with
// resource_already_exists_exception. Here both shared one data directory:
// the create must be refused and the resize's target must hold the source's
// documents, each once, where the target's table names.
func TestReviewBaselineCreateDuringResizeOfSameName(t *testing.T) {
	c := newCluster(t)
	s, _ := routing.NewSettings("source", 4, 0, 1)
	model := loadIndex(t, c, "source", s, 20000)
	if err := c.SetWriteBlock("source", true); err != nil {
		t.Fatal(err)
	}
	resized := make(chan error, 1)
	go func() {
		_, _, err := c.Resize(ResizeRequest{Op: routing.Split, Source: "source", Target: "target", TargetShards: 8, Cleanup: CleanupPerDoc})
		resized <- err
	}()
	time.Sleep(20 * time.Millisecond) // the resize is building its target
	ts, _ := routing.NewSettings("target", 2, 0, 1)
	_, createErr := c.CreateIndex("target", ts)
	resizeErr := <-resized
	if createErr == nil && resizeErr == nil {
		t.Fatalf("both the resize and a create of its target's name succeeded")
	}
	if resizeErr != nil {
		t.Fatalf("the resize failed (create = %v): %v", createErr, resizeErr)
	}
	ix, _ := c.Index("target")
	if got := ix.Settings().Shards; got != 8 {
		t.Errorf("the target serves %d shards, want the resize's 8", got)
	}
	if err := c.PutAlias("alias", "target"); err != nil {
		t.Fatal(err)
	}
	var re *routing.Error
	if !errors.As(createErr, &re) || re.Exception != routing.ResourceAlreadyExists {
		t.Errorf("create during the resize = %v, want resource_already_exists_exception", createErr)
	}
	checkIndex(t, c, "target", model)
}
