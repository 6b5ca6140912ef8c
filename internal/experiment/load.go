package experiment

import (
	"context"
	"sync"
	"time"

	"github.com/shardsplit/shardsplit/internal/loadgen"
)

// loadRun is a strategy run's continuous write load plus the sampler of
// its peak disk usage. Both strategies measure the same way through it.
type loadRun struct {
	start    time.Time
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopPeak func()
}

// startLoad records the disk usage before, starts sampling its peak every
// 100 ms, and starts the load; out.Load is set when the load stops.
func startLoad(ctx context.Context, cfg loadgen.Config, sink loadgen.Sink, disk func() int64, out *Outcome) *loadRun {
	out.DiskBefore = disk()
	out.DiskPeak = out.DiskBefore
	l := &loadRun{stopPeak: watchPeak(disk, &out.DiskPeak)}
	loadCtx, cancel := context.WithCancel(ctx)
	l.cancel, l.start = cancel, time.Now()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		out.Load = loadgen.Run(loadCtx, cfg, sink, l.start)
	}()
	return l
}

// since is the time since the load started: the runs' time origin.
func (l *loadRun) since() time.Duration { return time.Since(l.start) }

// stopLoad stops the writers and records when.
func (l *loadRun) stopLoad(out *Outcome) {
	out.End = l.since()
	l.cancel()
	l.wg.Wait()
}

// finishDisk stops the sampler and records the disk usage after.
func (l *loadRun) finishDisk(disk func() int64, out *Outcome) {
	l.stopPeak()
	out.DiskAfter = disk()
	out.DiskPeak = max(out.DiskPeak, out.DiskAfter)
}

// watchPeak samples disk every 100 ms into peak until the returned
// function is called.
func watchPeak(disk func() int64, peak *int64) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	p := *peak
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p = max(p, disk())
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait() // the sampler has stopped: p is ours to read
		*peak = max(*peak, p)
	}
}
