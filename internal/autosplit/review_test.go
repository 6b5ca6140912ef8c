package autosplit

import (
	"strings"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/policy"
)

// TestReviewAutosplitNewRefusesMissingParts: a Config without a node or an
// executor was accepted, and the loop then panicked with a nil pointer on
// its first Tick (or on its first action). New must say what is missing.
func TestReviewAutosplitNewRefusesMissingParts(t *testing.T) {
	n := openNode(t)
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no node", Config{Executor: &recorder{}, Thresholds: policy.DefaultThresholds()}, "node"},
		{"no executor", Config{Node: n, Thresholds: policy.DefaultThresholds()}, "executor"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := New(c.cfg)
			if err == nil {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("New accepted a config with %s; Tick panicked: %v", c.name, p)
					}
				}()
				_, terr := l.Tick(time.Now())
				t.Fatalf("New accepted a config with %s (Tick: %v)", c.name, terr)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not name the %s", err, c.want)
			}
		})
	}
}
