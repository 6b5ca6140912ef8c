package clusterbench

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/routing"
)

// Sink writes documents over REST: writer w through node w mod n, moving
// to the next live node when one does not answer, until the write is
// acknowledged or 30 s passed (a client with several hosts does this).
type Sink struct {
	c     *Cluster
	index string
}

// NewSink writes to index through the cluster's nodes.
func NewSink(c *Cluster, index string) *Sink { return &Sink{c: c, index: index} }

// Write indexes or deletes one document.
func (s *Sink) Write(w int, op loadgen.Op) (int, error) {
	// The load generator's sources are random bytes; a document is JSON,
	// so they go base64 in one field, cut to keep the document's size.
	method, body := http.MethodPut, `{"v":"`+base64.StdEncoding.EncodeToString(op.Source[:len(op.Source)*3/4])+`"}`
	if op.Delete {
		method, body = http.MethodDelete, ""
	}
	path := "/" + s.index + "/_doc/" + op.ID
	if op.Routing != "" {
		path += "?routing=" + op.Routing
	}
	deadline := time.Now().Add(30 * time.Second)
	node := w % len(s.c.nodes)
	for retries := 0; ; retries++ {
		for k := 0; k < len(s.c.nodes) && !s.c.Alive(node); k++ {
			node = (node + 1) % len(s.c.nodes)
		}
		status, _, err := s.c.DoOn(node, method, path, body)
		if err == nil || (op.Delete && status == http.StatusNotFound) {
			return retries, nil
		}
		if time.Now().After(deadline) {
			return retries, err
		}
		node = (node + 1) % len(s.c.nodes)
		time.Sleep(10 * time.Millisecond)
	}
}

// LoadConfig is the write load of a measurement (the split benchmark's:
// 5,000 writes/s, 64 writers, 1 KiB documents, fsync before every
// acknowledgement).
type LoadConfig struct {
	Rate     float64
	Writers  int
	DocSize  int
	Warmup   time.Duration // not measured
	Duration time.Duration // measured
}

func (l *LoadConfig) defaults() {
	if l.Rate == 0 {
		l.Rate = 5000
	}
	if l.Writers == 0 {
		l.Writers = 64
	}
	if l.DocSize == 0 {
		l.DocSize = 1024
	}
	if l.Warmup == 0 {
		l.Warmup = 2 * time.Second
	}
	if l.Duration == 0 {
		l.Duration = 10 * time.Second
	}
}

// CostRun is one run of the replication-cost measurement.
type CostRun struct {
	Replicas int           `json:"replicas"`
	OpsPerS  float64       `json:"ops_per_s"`
	P50      time.Duration `json:"p50_ns"`
	P99      time.Duration `json:"p99_ns"`
	Acked    int           `json:"acked"`
	Errors   int           `json:"errors"`
}

// ReplicationCost runs the same load against an index without replicas
// and one with a replica, alternating which goes first, runs times each:
// the ratio of their throughputs and p99s is what a replica costs a write.
func ReplicationCost(ctx context.Context, c *Cluster, shards, runs int, load LoadConfig, progress func(string)) ([]CostRun, error) {
	load.defaults()
	var out []CostRun
	for r := range runs {
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		for _, replicas := range order {
			index := fmt.Sprintf("cost-%d-%d", r, replicas)
			run, err := costRun(ctx, c, index, shards, replicas, load)
			if err != nil {
				return out, err
			}
			progress(fmt.Sprintf("run %d, %d replica(s): %.0f writes/s, p50 %v, p99 %v", r+1, replicas, run.OpsPerS,
				run.P50.Round(10*time.Microsecond), run.P99.Round(10*time.Microsecond)))
			out = append(out, run)
		}
	}
	return out, nil
}

func createIndex(c *Cluster, index string, shards, replicas int) error {
	body := fmt.Sprintf(`{"settings":{"number_of_shards":%d,"number_of_replicas":%d}}`, shards, replicas)
	if _, _, err := c.Do("PUT", "/"+index, body); err != nil {
		return err
	}
	return c.WaitGreen(index, 60*time.Second)
}

func costRun(ctx context.Context, c *Cluster, index string, shards, replicas int, load LoadConfig) (CostRun, error) {
	if err := createIndex(c, index, shards, replicas); err != nil {
		return CostRun{}, err
	}
	defer func() { _, _, _ = c.Do("DELETE", "/"+index, "") }()
	ctx, cancel := context.WithTimeout(ctx, load.Warmup+load.Duration)
	defer cancel()
	res := loadgen.Run(ctx, loadgen.Config{Writers: load.Writers, Rate: load.Rate, DocSize: load.DocSize, Seed: 1}, NewSink(c, index), time.Now())
	w := loadgen.Summarize(res.Records, load.Warmup, load.Warmup+load.Duration)
	return CostRun{Replicas: replicas, OpsPerS: w.OpsPerS, P50: w.P50, P99: w.P99, Acked: w.Acked, Errors: w.Errors}, nil
}

// FailoverRun is one kill of a primary's node under load.
type FailoverRun struct {
	Victim string `json:"victim"`
	// Unavailable is from the kill to the first acknowledgement of a write
	// begun after it to a shard whose primary the victim held (a write
	// acknowledged in the instant before the process died is no sign of
	// availability).
	Unavailable time.Duration `json:"unavailable_ns"`
	// WriteP99 and WriteMax are the latencies of the writes to those
	// shards that were in flight at the kill or started within 10 s of it.
	WriteMax time.Duration `json:"write_max_ns"`
	// Green is from the victim's restart until the index is green again:
	// its copies rebuilt by peer recovery (the load has stopped).
	Green  time.Duration `json:"green_ns"`
	Acked  int           `json:"acked"`
	Errors int           `json:"errors"`
}

// Failover kills, runs times, the node holding the primary of shard 0 of
// an index with a replica under load, measures how long writes to its
// shards go unacknowledged, restarts it and waits for green.
func Failover(ctx context.Context, c *Cluster, shards, runs int, load LoadConfig, progress func(string)) ([]FailoverRun, error) {
	load.defaults()
	var out []FailoverRun
	for r := range runs {
		index := fmt.Sprintf("failover-%d", r)
		run, err := failoverRun(ctx, c, index, shards, load)
		if err != nil {
			return out, err
		}
		progress(fmt.Sprintf("run %d: killed %s; its shards unavailable for %v; green %v after its restart", r+1, run.Victim,
			run.Unavailable.Round(time.Millisecond), run.Green.Round(time.Millisecond)))
		out = append(out, run)
	}
	return out, nil
}

func failoverRun(ctx context.Context, c *Cluster, index string, shards int, load LoadConfig) (FailoverRun, error) {
	if err := createIndex(c, index, shards, 1); err != nil {
		return FailoverRun{}, err
	}
	rows, err := c.Shards(index)
	if err != nil {
		return FailoverRun{}, err
	}
	victim := ""
	affected := map[routing.ShardID]bool{}
	for _, row := range rows {
		if row.Shard == "0" && row.Prirep == "p" {
			victim = row.Node
		}
	}
	for _, row := range rows {
		if row.Prirep == "p" && row.Node == victim {
			sh, _ := strconv.Atoi(row.Shard)
			affected[routing.ShardID(sh)] = true
		}
	}
	settings, err := routing.NewSettings(index, shards, 0, 0)
	if err != nil {
		return FailoverRun{}, err
	}
	table, err := routing.NewTable(routing.ModePartition, settings)
	if err != nil {
		return FailoverRun{}, err
	}
	start := time.Now()
	var kill atomic.Int64
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var res *loadgen.Result
	wg.Add(1)
	go func() {
		defer wg.Done()
		res = loadgen.Run(runCtx, loadgen.Config{Writers: load.Writers, Rate: load.Rate, DocSize: load.DocSize, Seed: 2,
			Moving: func(id, rv string) bool { _, sh := table.Route(id, rv); return affected[sh] }}, NewSink(c, index), start)
	}()
	time.Sleep(load.Warmup)
	vi := c.NodeIndex(victim)
	kill.Store(int64(time.Since(start)))
	killErr := c.Kill(vi)
	time.Sleep(10 * time.Second)
	cancel()
	wg.Wait()
	if killErr != nil {
		return FailoverRun{}, killErr
	}
	restarted := time.Now()
	if err := c.Restart(vi); err != nil {
		return FailoverRun{}, err
	}
	defer func() { _, _, _ = c.Do("DELETE", "/"+index, "") }()
	// Ask a node that stayed up: the restarted one answers from the state
	// it had until it has caught up.
	if err := c.WaitGreenOn((vi+1)%len(c.nodes), index, 120*time.Second); err != nil {
		return FailoverRun{}, fmt.Errorf("clusterbench: %s not green after %s came back: %w", index, victim, err)
	}
	at := time.Duration(kill.Load())
	run := FailoverRun{Victim: victim, Unavailable: -1, Green: time.Since(restarted)}
	for _, rec := range res.Records {
		if !rec.Moving {
			continue
		}
		if !rec.OK {
			run.Errors++
			continue
		}
		run.Acked++
		if rec.Start >= at && (run.Unavailable < 0 || rec.End-at < run.Unavailable) {
			run.Unavailable = rec.End - at
		}
		if rec.End > at && rec.Start < at+10*time.Second {
			run.WriteMax = max(run.WriteMax, rec.End-rec.Start)
		}
	}
	if run.Unavailable < 0 {
		return run, fmt.Errorf("clusterbench: no write to %s's shards acknowledged after the kill", victim)
	}
	return run, nil
}

// RecoveryRun is one peer recovery of a copy.
type RecoveryRun struct {
	Bytes      int64         `json:"bytes"`       // the primary copy's size on disk
	Docs       int64         `json:"docs"`        // documents in it
	Recovery   time.Duration `json:"recovery_ns"` // number_of_replicas 0 → 1 until green
	CopyOnDisk time.Duration `json:"copy_ns"`     // copying the same files on this disk, fsync'd
	CopyBytes  int64         `json:"copy_bytes"`  // what that copy copied (a file compacted away meanwhile is not)
}

// Recovery loads an index of one shard to about size bytes once, then,
// runs times, adds a replica and measures the time until it is green (a
// peer recovery from scratch: the files of a checkpoint, then the history
// above it) against copying the primary's files on this disk, and takes
// the replica away again.
func Recovery(ctx context.Context, c *Cluster, size int64, runs int, progress func(string)) ([]RecoveryRun, error) {
	const index = "recovery"
	if err := createIndex(c, index, 1, 0); err != nil {
		return nil, err
	}
	defer func() { _, _, _ = c.Do("DELETE", "/"+index, "") }()
	loadStart := time.Now()
	docs, err := bulkLoad(c, index, size)
	if err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("loaded %d documents in %v", docs, time.Since(loadStart).Round(time.Second)))
	var out []RecoveryRun
	for r := range runs {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		rows, err := c.Shards(index)
		if err != nil {
			return out, err
		}
		primary := c.nodes[c.NodeIndex(rows[0].Node)]
		dir, bytes := largestIndexDir(primary.Data)
		copyTook, copied, err := timeCopy(dir, filepath.Join(os.TempDir(), fmt.Sprintf("clusterbench-copy-%d", r)))
		if err != nil {
			return out, err
		}
		start := time.Now()
		if _, _, err := c.Do("PUT", "/"+index+"/_settings", `{"index":{"number_of_replicas":1}}`); err != nil {
			return out, err
		}
		if err := c.WaitGreen(index, 30*time.Minute); err != nil {
			return out, err
		}
		run := RecoveryRun{Bytes: bytes, Docs: docs, Recovery: time.Since(start), CopyOnDisk: copyTook, CopyBytes: copied}
		progress(fmt.Sprintf("run %d: %d documents, %.0f MiB: recovered in %v; the same files copied on this disk in %v",
			r+1, docs, float64(bytes)/(1<<20), run.Recovery.Round(time.Millisecond), copyTook.Round(time.Millisecond)))
		out = append(out, run)
		if _, _, err := c.Do("PUT", "/"+index+"/_settings", `{"index":{"number_of_replicas":0}}`); err != nil {
			return out, err
		}
	}
	return out, nil
}

// bulkLoad writes 1 KiB documents to index with 8 concurrent _bulk
// requests of 500 until about size bytes of source went in. A document's
// text is random (base64 of random bytes), so that the copy on disk is
// about as large as its source: a repeated letter would compress to a
// fraction of it, and the recovery would move far less than asked. Items
// refused with 429 or 503 (the node overloaded, a write timed out: a
// Pebble write stall under a sustained bulk load holds the primary's loop)
// are sent again after a pause, up to 10 times, as a bulk client retries
// them; any other error ends the load.
func bulkLoad(c *Cluster, index string, size int64) (int64, error) {
	const perBulk, workers, docSize, tries = 500, 8, 1024, 10
	total := size / docSize
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			raw := make([]byte, (docSize-10)*3/4)
			for {
				from := next.Add(perBulk) - perBulk
				if from >= total {
					return
				}
				var lines []string
				for k := from; k < min(from+perBulk, total); k++ {
					for i := 0; i+8 <= len(raw); i += 8 {
						binary.LittleEndian.PutUint64(raw[i:], rng.Uint64())
					}
					lines = append(lines, fmt.Sprintf("{\"index\":{\"_id\":\"d%d\"}}\n{\"msg\":\"%s\"}\n", k, base64.StdEncoding.EncodeToString(raw)))
				}
				err := sendBulk(c, w, index, lines, tries)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return total, firstErr
}

// sendBulk sends the items (action and source lines) through node w mod
// n, sending again those refused with 429 or 503.
func sendBulk(c *Cluster, w int, index string, items []string, tries int) error {
	for try := 1; ; try++ {
		_, body, err := c.DoOn(w%len(c.nodes), "POST", "/"+index+"/_bulk", strings.Join(items, ""))
		if err != nil {
			if try < tries {
				time.Sleep(time.Duration(try) * time.Second)
				continue
			}
			return err
		}
		var r struct {
			Errors bool                         `json:"errors"`
			Items  []map[string]json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return fmt.Errorf("clusterbench: a bulk answer of %s: %w", index, err)
		}
		if !r.Errors {
			return nil
		}
		var again []string
		for i, it := range r.Items {
			for _, v := range it {
				var item struct {
					Status int             `json:"status"`
					Error  json.RawMessage `json:"error"`
				}
				if json.Unmarshal(v, &item) != nil || item.Error == nil {
					continue
				}
				if (item.Status != 429 && item.Status != 503) || try >= tries {
					return fmt.Errorf("clusterbench: a bulk of %s had errors (try %d): %s", index, try, v)
				}
				again = append(again, items[i])
			}
		}
		items = again
		time.Sleep(time.Duration(try) * time.Second)
	}
}

// largestIndexDir returns the largest copy directory under a node's data
// directory, and its size.
func largestIndexDir(data string) (string, int64) {
	best, bestSize := "", int64(-1)
	root := filepath.Join(data, "indices")
	entries, _ := os.ReadDir(root)
	for _, ix := range entries {
		shards, _ := os.ReadDir(filepath.Join(root, ix.Name()))
		for _, sh := range shards {
			dir := filepath.Join(root, ix.Name(), sh.Name())
			if size := dirSize(dir); size > bestSize {
				best, bestSize = dir, size
			}
		}
	}
	return best, bestSize
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// timeCopy copies the files of src to dst on the same disk, syncing each,
// and removes dst: the raw copy a recovery of the same bytes competes with.
// src is a live store: a file a compaction deleted meanwhile is skipped,
// and the bytes copied are returned with the time.
func timeCopy(src, dst string) (time.Duration, int64, error) {
	defer os.RemoveAll(dst)
	start := time.Now()
	var copied int64
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		copied += int64(len(data))
		f, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			_ = f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			_ = f.Close()
			return err
		}
		return f.Close()
	})
	return time.Since(start), copied, err
}

// Percentile returns the p-th percentile of xs (nearest rank: the
// smallest value with at least p% of xs at or below it).
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// Median returns the median of xs.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
