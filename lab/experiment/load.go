package experiment

import (
	"context"
	"sync"
	"time"

	"github.com/shardsplit/shardsplit/lab/loadgen"
)

// loadRun is a strategy run's continuous write load, its read load (if
// any) and the sampler of its disk usage. Every strategy measures the same
// way through it.
type loadRun struct {
	start    time.Time
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopDisk func()
}

// readLoad is a read load and what serves it.
type readLoad struct {
	cfg    loadgen.ReadConfig
	reader loadgen.Reader
}

func (r readLoad) on() bool { return r.reader != nil && (r.cfg.GetRate > 0 || r.cfg.SearchRate > 0) }

// startLoad records the disk usage before, starts sampling it every
// 100 ms, and starts the writes and the reads; out.Load and out.Reads are
// set when the load stops.
func startLoad(ctx context.Context, cfg loadgen.Config, sink loadgen.Sink, reads readLoad, disk func() int64, out *Outcome) *loadRun {
	out.DiskBefore = disk()
	out.DiskPeak = out.DiskBefore
	loadCtx, cancel := context.WithCancel(ctx)
	l := &loadRun{cancel: cancel, start: time.Now()}
	l.stopDisk = watchDisk(disk, l.start, out)
	var recent *loadgen.Recent
	if reads.on() {
		recent = loadgen.NewRecent(4096)
		cfg.Recent = recent
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			out.Reads = loadgen.RunReads(loadCtx, reads.cfg, cfg, reads.reader, recent, l.start)
		}()
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		out.Load = loadgen.Run(loadCtx, cfg, sink, l.start)
	}()
	return l
}

// since is the time since the load started: the runs' time origin.
func (l *loadRun) since() time.Duration { return time.Since(l.start) }

// stopLoad stops the writers and readers and records when.
func (l *loadRun) stopLoad(out *Outcome) {
	out.End = l.since()
	l.cancel()
	l.wg.Wait()
}

// finishDisk stops the sampler and records the disk usage after (the
// settled size).
func (l *loadRun) finishDisk(disk func() int64, out *Outcome) {
	l.stopDisk()
	out.DiskAfter = disk()
	out.DiskPeak = max(out.DiskPeak, out.DiskAfter)
	out.Disk = append(out.Disk, DiskSample{At: l.since(), Bytes: out.DiskAfter})
}

// DiskSample is the unique bytes on disk at a time since the load started.
type DiskSample struct {
	At    time.Duration
	Bytes int64
}

// watchDisk samples disk every 100 ms into out.Disk and out.DiskPeak
// until the returned function is called.
func watchDisk(disk func() int64, start time.Time, out *Outcome) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var samples []DiskSample
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
				samples = append(samples, DiskSample{At: time.Since(start), Bytes: disk()})
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait() // the sampler has stopped: samples are ours to read
		out.Disk = append(out.Disk, samples...)
		for _, s := range samples {
			out.DiskPeak = max(out.DiskPeak, s.Bytes)
		}
	}
}
