package baseline

import (
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/routing"
)

// An AliasWriter that wrote to an index keeps writing through the alias
// after that index is deleted and an index of the same name is created
// (a failed resize's target made again, a source recreated): its write goes
// to the index the alias names now. It must neither spin on the deleted
// index's closed node nor write anywhere else.
func TestReviewBaselineAliasWriterAfterIndexRecreated(t *testing.T) {
	c := newCluster(t)
	s, _ := routing.NewSettings("idx", 2, 0, 1)
	loadIndex(t, c, "idx", s, 10)
	w := c.NewAliasWriter("alias")
	if _, err := w.Write("before", "", []byte("v"), false); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteIndex("idx"); err != nil {
		t.Fatal(err)
	}
	s4, _ := routing.NewSettings("idx", 4, 0, 1)
	if _, err := c.CreateIndex("idx", s4); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := w.Write("after", "", []byte("v"), false)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("write through the alias to the recreated index: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the alias writer spun for 5 s on the deleted index's closed node")
	}
	d, found, err := node_get(c, "alias", "after", "")
	if err != nil || !found || string(d.Source) != "v" {
		t.Errorf("the write is not in the recreated index: %v, %v", found, err)
	}
}
