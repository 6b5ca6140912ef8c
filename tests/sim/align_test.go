package sim

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// alignSwitch (SHARDSPLIT_SIM_ALIGN=1) makes some split starts aligned, as
// splitter.Driver.Run makes them with Config.AlignFlush: the parent's log
// is held first (AlignWithOwnFlush), the parent flushes on its own past
// the hold, and the split that follows forces no flush
// (ChildStats.OwnFlush: the children link the flushed tables and the
// catch-up replays the rest from the log). The hold is released when the
// split ends, as Run's is when it returns. Without the switch no seed
// draws anything more: every seed runs as before.
//
// The simulation's memtables never fill (16 MiB), so no store ever
// flushes on its own: the switch also lets a step begin with an own flush
// of a shard (storage.Engine.FlushOwn), the parent of the running split
// half the time, so an own flush also lands between an aligned start that
// gave up and the clone, during a catch-up, or on a child.
var alignSwitch = os.Getenv("SHARDSPLIT_SIM_ALIGN") != ""

// alignMax bounds an aligned start's wait (Config.AlignFlush).
const alignMax = 500 * time.Millisecond

// alignMode is how an aligned start reaches the split.
type alignMode uint8

const (
	// alignHoldFlush: hold, own flush, wait (the wait is ready and the
	// split forces no flush, unless a fault failed the flush).
	alignHoldFlush alignMode = iota
	// alignFlushHold: own flush, then hold, then wait: the flush came
	// before the hold, so the wait must not be ready (a finding if it is:
	// the log would not cover what the tables lack).
	alignFlushHold
	// alignNoFlush: splitter.AlignWithOwnFlush itself, with no flush
	// coming: the wait gives up on the idle store and must not be ready.
	alignNoFlush
	alignModes
)

var alignModeNames = [alignModes]string{"hold-flush", "flush-hold", "no-flush"}

func (m alignMode) String() string { return alignModeNames[m] }

// extraHold is a log hold an aligned start took: released when its split
// ends (split nil once that release failed: the hold then stays, as Run
// leaves it, until the process ends).
type extraHold struct {
	shard   routing.ShardID
	s       *storage.Shard
	release func() error
	split   *simSplit
	ready   bool // its wait said the log covers every unflushed write
}

// drawAlignSwarm draws the seed's aligned-start and own-flush
// probabilities from a generator of their own. Not in seeds whose faults
// may hit the WAL (pebbleLogs with copyChildWAL): a flush after a failed
// WAL write kills the test binary there (injector.noWALFaults).
func (w *world) drawAlignSwarm() {
	if !alignSwitch {
		return
	}
	w.alignRng = rand.New(rand.NewPCG(w.seed, 0xa119))
	w.sw.pAlign = []float64{0, 0.5, 0.9}[w.alignRng.IntN(3)]
	w.sw.pOwnFlush = []float64{0, 0.02, 0.05}[w.alignRng.IntN(3)]
	if w.sw.pebbleLogs && w.sw.copyChildWAL {
		w.sw.pAlign, w.sw.pOwnFlush = 0, 0
	}
}

// drawAlign decides whether a split start is aligned, and how.
func (w *world) drawAlign() (alignMode, bool) {
	if w.alignRng == nil || w.alignRng.Float64() >= w.sw.pAlign {
		return 0, false
	}
	switch x := w.alignRng.IntN(6); {
	case x < 4:
		return alignHoldFlush, true
	case x == 4:
		return alignFlushHold, true
	default:
		return alignNoFlush, true
	}
}

// alignStart holds parent's log and waits for its own flush (mode says
// how), before the split of parent starts. It returns the hold (nil if the
// node has no such shard: the split's reservation refuses it), and false
// if the process died meanwhile.
func (w *world) alignStart(parent routing.ShardID, mode alignMode) (*extraHold, bool) {
	n := w.n
	s, ok := n.ShardStore(parent)
	if !ok {
		w.tracef("align", "parent=%d mode=%s: no such shard, nothing held", parent, mode)
		return nil, true
	}
	w.stats.alignStarts[mode]++
	// A hold kept from an earlier start (its release failed) began before
	// this one: the log may rightly cover what the tables lack then.
	first := w.extraHolds(parent, s) == 0
	eng := n.Engine()
	var ferr, aerr error
	var ready bool
	release := s.ReleaseLog
	if !w.do(func() {
		switch mode {
		case alignNoFlush:
			_, ready, release = splitter.AlignWithOwnFlush(n, parent, alignMax, zap.NewNop())
			return
		case alignFlushHold:
			ferr = eng.FlushOwn(s)
			s.HoldLog()
		default:
			s.HoldLog()
			ferr = eng.FlushOwn(s)
		}
		_, ready, aerr = eng.AwaitOwnFlush(s, alignMax)
	}) {
		w.tracef("align", "parent=%d mode=%s -> process died", parent, mode)
		return nil, false
	}
	if ready {
		w.stats.alignReady++
	}
	flush := okOr(ferr)
	if mode == alignNoFlush {
		flush = "none"
	}
	w.tracef("align", "parent=%d mode=%s flush=%s -> ready=%v err=%v holds=%d", parent, mode, flush, ready, aerr, s.LogHolds())
	if ready && first && mode != alignHoldFlush && w.sw.layout == storage.LayoutPerShard {
		w.fail("aligned start of %d (%s): the wait says the log covers every unflushed write, but no flush followed the log hold", parent, mode)
	}
	return &extraHold{shard: parent, s: s, release: release, ready: ready}, true
}

// addHold records an aligned start's hold as the split's.
func (w *world) addHold(h *extraHold, sp *simSplit) {
	if h != nil {
		h.split = sp
		w.holds = append(w.holds, h)
	}
}

// releaseHolds releases the aligned holds of a split that ended, as Run
// does when it returns. A release that fails (its trim) leaves the hold:
// recorded, so every later write of the shard must still be logged; with
// no fault injected it is a finding. It returns false if the process died.
func (w *world) releaseHolds(sp *simSplit) bool {
	var kept []*extraHold
	for i, h := range w.holds {
		if h.split != sp {
			kept = append(kept, h)
			continue
		}
		var err error
		if !w.do(func() { err = h.release() }) {
			w.tracef("align-release", "parent=%d -> process died", h.shard)
			w.holds = append(kept, w.holds[i:]...)
			return false
		}
		if err != nil {
			w.stats.holdsStuck++
			w.tracef("align-release", "parent=%d -> %v (the hold stays)", h.shard, err)
			if !w.faulted() {
				w.fail("release of the aligned log hold of %d failed with no fault injected: %v", h.shard, err)
			}
			h.split = nil
			kept = append(kept, h)
			continue
		}
		w.tracef("align-release", "parent=%d -> ok holds=%d", h.shard, h.s.LogHolds())
	}
	w.holds = kept
	return true
}

// extraHolds counts the aligned holds on shard (the object s: a new
// incarnation's shard holds none of the old one's).
func (w *world) extraHolds(shard routing.ShardID, s *storage.Shard) int {
	k := 0
	for _, h := range w.holds {
		if h.shard == shard && h.s == s {
			k++
		}
	}
	return k
}

// countOwnFlush counts a split whose children were made with no forced
// flush. Only a hold taken before the split's own can make that so (the
// split's hold and its children's creation are one step, with no flush
// between): without one it is a finding. So is the converse: children
// made without their WAL (the build that flushes) after an aligned wait
// that was ready, with a forced flush all the same (the log covered what
// the tables lacked once, and a held log goes on covering it).
func (w *world) countOwnFlush(sp *simSplit, rep splitter.Report) {
	if sp.merge {
		return
	}
	if !slices.ContainsFunc(rep.ChildStats, func(c storage.ChildStats) bool { return c.OwnFlush }) {
		for _, h := range w.holds {
			if h.split == sp && h.ready && w.sw.layout == storage.LayoutPerShard && len(rep.ChildStats) > 0 && rep.ChildStats[0].OmittedWAL {
				w.fail("split of %d forced a flush of its parent though its aligned wait was ready: %+v", sp.plan.Parent, rep.ChildStats)
			}
		}
		return
	}
	w.stats.ownFlushSplits++
	if rep.Phase == splitter.PhaseDone {
		w.stats.ownFlushDone++
	}
	held := false
	for _, h := range w.holds {
		held = held || h.shard == sp.plan.Parent
	}
	if !held {
		w.fail("split of %d made its children with no flush (OwnFlush), but nothing held its log before the split's own hold", sp.plan.Parent)
	}
}

// maybeOwnFlush begins a step, with the seed's probability, with an own
// flush of a shard: the running split's parent (or a merge's source) half
// the time, else any active shard. It reports whether the process died.
func (w *world) maybeOwnFlush() bool {
	if w.alignRng == nil || w.sw.pOwnFlush == 0 || w.alignRng.Float64() >= w.sw.pOwnFlush {
		return false
	}
	ids := w.n.Table().ActiveShards()
	if w.sp != nil && w.alignRng.IntN(2) == 0 {
		ids = w.sp.logShards()
	}
	id := ids[w.alignRng.IntN(len(ids))]
	s, ok := w.n.ShardStore(id)
	if !ok {
		w.tracef("own-flush", "shard=%d: no such shard", id)
		return false
	}
	w.stats.ownFlushes++
	eng := w.n.Engine()
	var err error
	if !w.do(func() { err = eng.FlushOwn(s) }) {
		w.tracef("own-flush", "shard=%d -> process died", id)
		return true
	}
	if err != nil {
		w.stats.ownFailed++
	}
	w.tracef("own-flush", "shard=%d -> %s", id, okOr(err))
	return false
}

// checkHolds: every shard's operation-log hold count (Shard.LogHolds) is
// what the simulator knows was taken and not released: the running
// operation's (when it holds its log) plus the aligned starts'. A count
// above it is a leaked hold (every write logged, for ever), below it a
// hold released too early (a trim while a split needs the log). Skipped
// while the apply lock may be held across steps (LogHolds takes it): in
// the handoff's window and while writes are parked.
func (w *world) checkHolds() {
	if off.has("loghold") || len(w.parked) > 0 {
		return
	}
	ids := slices.Clone(w.n.Table().ActiveShards())
	var opShards []routing.ShardID
	if w.sp != nil {
		m := w.sp.Machine()
		if m.Fenced() || m.Phase() == splitter.PhaseHandoff && m.Ready().Intent.Kind != splitter.IntentFence {
			return
		}
		opShards = w.sp.logShards()
		ids = append(ids, opShards...)
	}
	for _, h := range w.holds {
		ids = append(ids, h.shard)
	}
	slices.Sort(ids)
	var problems []string
	// Through do: a count that cannot be read (an apply lock held for
	// good) is a hang with every goroutine's stack, not a stuck binary.
	if !w.do(func() {
		for _, id := range slices.Compact(ids) {
			s, ok := w.n.ShardStore(id)
			if !ok {
				continue
			}
			want, unknown := w.extraHolds(id, s), false
			if slices.Contains(opShards, id) {
				switch w.sp.logHold {
				case holdYes:
					want++
				case holdUnknown:
					unknown = true
				}
			}
			if got := s.LogHolds(); got != want && !(unknown && got == want+1) {
				problems = append(problems, fmt.Sprintf("shard %d has %d operation-log holds; the simulator expects %d (unknown whether the running %s holds it: %v)",
					id, got, want, w.opName(), unknown))
			}
		}
	}) {
		return
	}
	if len(problems) > 0 {
		w.fail("%s (a leaked hold logs every write for good; a missing one let a trim run while a split needs the log)", strings.Join(problems, "; "))
	}
}

// opName names the running operation in findings.
func (w *world) opName() string {
	if w.sp == nil {
		return "operation (none)"
	}
	return w.sp.what()
}

func okOr(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
