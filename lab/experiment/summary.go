package experiment

import (
	"slices"
	"time"

	"github.com/shardsplit/shardsplit/lab/loadgen"
)

// Summary is one strategy's measures: a row of splitdemo compare's
// summary.json (the keys are its contract, each documented in
// SummaryKeyDocs, which the report's method section prints) and what
// splitdemo findings reads its questions 2 to 5 from.
type Summary struct {
	MaxWriteStallMs          float64 `json:"max_write_stall_ms"`
	WriteP50Ms               float64 `json:"write_p50_ms"`
	WriteP99Ms               float64 `json:"write_p99_ms"`
	WriteMaxMs               float64 `json:"write_max_ms"`
	ThroughputSteadyOps      float64 `json:"throughput_steady_ops"`
	ThroughputDuringSplitOps float64 `json:"throughput_during_split_ops"`
	SplitDurationMs          float64 `json:"split_duration_ms"`
	WriteErrors              int     `json:"write_errors"`
	WriteRetries             int     `json:"write_retries"`
	AckedWrites              int     `json:"acked_writes"`
	LostWrites               int     `json:"lost_writes"`
	MisplacedDocs            int     `json:"misplaced_docs"`
	DuplicateDocs            int     `json:"duplicate_docs"`
	BytesWritten             uint64  `json:"bytes_written"`
	DiskBeforeBytes          int64   `json:"disk_before_bytes"`
	DiskPeakBytes            int64   `json:"disk_peak_bytes"`
	DiskAfterBytes           int64   `json:"disk_after_bytes"`

	GetP99SteadyMs    float64 `json:"get_p99_steady_ms"`
	GetP99DuringMs    float64 `json:"get_p99_during_ms"`
	GetP99AfterMs     float64 `json:"get_p99_after_ms"`
	SearchP99SteadyMs float64 `json:"search_p99_steady_ms"`
	SearchP99DuringMs float64 `json:"search_p99_during_ms"`
	SearchP99AfterMs  float64 `json:"search_p99_after_ms"`
	CountP99Ms        float64 `json:"count_p99_ms"`
	Reads             int     `json:"reads"`
	ReadErrors        int     `json:"read_errors"`
	ReadForeignDocs   int     `json:"read_foreign_docs"`

	Steady1sStallMs           float64 `json:"steady_1s_stall_ms"`
	SteadyWindowStallMs       float64 `json:"steady_window_stall_ms"`
	WriteP99FirstSecondMs     float64 `json:"write_p99_first_second_ms"`
	WriteP99SteadySecondMs    float64 `json:"write_p99_steady_second_ms"`
	AfterHandoffStallMs       float64 `json:"after_handoff_stall_ms"`
	ThroughputAfterHandoffOps float64 `json:"throughput_after_handoff_ops"`

	CleanupDurationMs   float64 `json:"cleanup_duration_ms"`
	CleanupBytesWritten uint64  `json:"cleanup_bytes_written"`
	CleanupDocsDeleted  int     `json:"cleanup_docs_deleted"`
	CleanupDocsMarked   int     `json:"cleanup_docs_marked"`
	CleanupWriteP99Ms   float64 `json:"cleanup_write_p99_ms"`
	CleanupSearchP99Ms  float64 `json:"cleanup_search_p99_ms"`
	ReclaimMs           float64 `json:"reclaim_ms"`

	MergeDurationMs   float64 `json:"merge_duration_ms"`
	MergeBytesWritten uint64  `json:"merge_bytes_written"`
	MergeWriteP99Ms   float64 `json:"merge_write_p99_ms"`
	LuceneMergeBytes  int64   `json:"lucene_merge_bytes"`

	AlignWaitMs float64 `json:"align_wait_ms"`
	Aligned     bool    `json:"aligned"`
}

// SummaryKeyDocs defines every Summary key, in the struct's order:
// splitdemo compare's method section prints them, and a test checks every
// key has one.
var SummaryKeyDocs = [][2]string{
	{"max_write_stall_ms", "the longest interval in the split window in which writes aimed at the moved documents (every document, for newindex) were outstanding and none was acknowledged"},
	{"write_p50_ms", "median latency (first attempt to acknowledgement, retries included) of the writes in flight during the split window"},
	{"write_p99_ms", "99th percentile of the same writes"},
	{"write_max_ms", "the slowest of the same writes"},
	{"throughput_steady_ops", "writes acknowledged per second in the steady window (after a 1 s warm-up, up to the split request)"},
	{"throughput_during_split_ops", "writes acknowledged per second in the split window"},
	{"split_duration_ms", "the split window: from the split request to the end of the last phase writers wait on (inplace, rfc: the handoff; newindex: write block to alias swap)"},
	{"write_errors", "writes that failed for good (every acknowledged or failed write of the run)"},
	{"write_retries", "stale-routing and write-block retries of all writes"},
	{"acked_writes", "writes acknowledged in the run"},
	{"lost_writes", "acknowledged writes missing or stale in the index afterwards, plus documents that should not exist (must be 0)"},
	{"misplaced_docs", "documents on a shard the final table does not name for them (must be 0)"},
	{"duplicate_docs", "documents found on more than one shard (must be 0)"},
	{"bytes_written", "bytes the storage engine wrote during the run (memtable flushes and compactions; WAL not included)"},
	{"disk_before_bytes", "unique bytes on disk when the load started (hard-linked files counted once)"},
	{"disk_peak_bytes", "the most unique bytes on disk, sampled every 100 ms"},
	{"disk_after_bytes", "unique bytes on disk at the end, once the load stopped and the cleanup ended (newindex: after deleting the source index): the settled size"},
	{"get_p99_steady_ms", "99th percentile latency of routed gets (by id and routing, of documents the writers had acknowledged) ending in the steady window"},
	{"get_p99_during_ms", "the same for gets in flight during the split window"},
	{"get_p99_after_ms", "the same for gets ending in the 10 s after the split window (or what the run has of them)"},
	{"search_p99_steady_ms", "99th percentile latency of unrouted searches (a page of 10 hits from every shard, each hit checked against the table searched) ending in the steady window"},
	{"search_p99_during_ms", "the same for searches in flight during the split window"},
	{"search_p99_after_ms", "the same for searches ending in the 10 s after the split window"},
	{"count_p99_ms", "99th percentile latency of the exact counts of every document over the whole run (every --count-every-th search, default every 200th: one every 10 s; a full scan here)"},
	{"reads", "gets, searches and counts issued"},
	{"read_errors", "reads that returned an error"},
	{"read_foreign_docs", "documents a read returned from a shard the table it read at does not name for them: a foreign document seen (must be 0)"},
	{"steady_1s_stall_ms", "the median, over the whole one-second windows of the steady window, of each window's longest write stall (same stall measure as max_write_stall_ms): the disk's own noise"},
	{"steady_window_stall_ms", "the same stall measure over steady windows as long as the split window: the median, over windows of the split window's length stepped by half of it across the steady window, of each window's longest write stall (one window, the whole steady window, when the split window is longer); max_write_stall_ms / steady_window_stall_ms is the split's stall against what the disk alone does in as long a window"},
	{"write_p99_first_second_ms", "99th percentile latency (first attempt to acknowledgement) of the writes aimed at the moved documents (every document, for newindex) that clients issued in the first second from the split request: the window, the handoff and what follows it, whatever the split window's length"},
	{"write_p99_steady_second_ms", "the same percentile for each whole second of the steady window, and the median of those: the first second's p99 against a steady second's"},
	{"after_handoff_stall_ms", "the longest write stall in the second after the split window ends"},
	{"throughput_after_handoff_ops", "writes acknowledged per second in the second after the split window ends (or in what the run has of it, when the load stopped sooner)"},
	{"cleanup_duration_ms", "the cleanup: inplace, retiring the parent (the children were excised at creation, in O(metadata)); rfc, retiring the parent, then each child's background removal of its foreign documents (config.cleanup: mark, a scan that routes every document and marks the foreign ones deleted; per-doc, point deletes in paced batches; range, range tombstones without reading them) and the compaction of those ranges, to the last child's end; newindex, the resize step under the write block (link, then mark, per-document deletes and compaction, or excise, then open; with mark the merge that reclaims the space comes after the alias swap, merge_duration_ms)"},
	{"cleanup_bytes_written", "bytes written (flushes and compactions) by the cleanup: inplace, the engine's during the parent's retirement; rfc, that plus what each child's store wrote while its cleanup ran (the writers' own flushes and compactions on those stores in that time included); newindex, the resize cleanup's own (writes are blocked)"},
	{"cleanup_docs_deleted", "documents the cleanup deleted one by one (per-doc cleanup: rfc, newindex)"},
	{"cleanup_docs_marked", "documents the cleanup's scan routed to another shard and marked deleted without rewriting any (mark cleanup: rfc, newindex), as OpenSearch's ShardSplittingQuery sets their live-docs bits"},
	{"cleanup_write_p99_ms", "99th percentile latency of the writes in flight while the cleanup ran"},
	{"cleanup_search_p99_ms", "99th percentile latency of the searches in flight while the cleanup ran"},
	{"reclaim_ms", "time from the split request until the space is reclaimed: the disk sample after which unique bytes on disk stay within 10 % of the settled size (disk_after_bytes); 10 % because the writers' own flushes and compactions move the total by a few percent"},
	{"merge_duration_ms", "the reclaim of the deleted or marked documents' space as a phase of its own, Lucene's merges: rfc, the children's compactions of their foreign ranges, the first's start to the last's end; newindex with the mark cleanup, the merge step after the alias swap, which no writer waits for (per-doc compacts inside the resize, under the write block, and range has no merge: 0)"},
	{"merge_bytes_written", "bytes the merging stores wrote while the merge ran (the writers' own flushes and compactions on them included)"},
	{"merge_write_p99_ms", "99th percentile latency of the writes in flight while the merge ran (0 without one)"},
	{"lucene_merge_bytes", "key and value bytes of the documents the mark cleanup's scans found the shards keep: what Lucene's merges rewrite, at least once, to reclaim the marked documents (a Lucene segment holds every shard's documents in indexing order, so its merge rewrites every live one); beside merge_bytes_written, what our compaction wrote: it drops whole the tables that lie inside a foreign key range and rewrites those across one's edge or holding recent writes of every range"},
	{"align_wait_ms", "in-place with --align-flush: how long the split waited, after its request and before its window, for the parent's store to flush its memtable on its own (in neither the steady nor the split window); 0 otherwise"},
	{"aligned", "in-place with --align-flush: whether that flush came within the bound; false past it (the split then forced the flush itself, as without the flag) and without the flag"},
}

// AfterWindow is how long after the split window the "after" measures
// look.
const AfterWindow = 10 * time.Second

// Windows are the spans of a run the summary measures in, since the
// load's start. Steady is [SteadyFrom, Outcome.SteadyEnd()): the load
// before the split request after a warm-up of a second (or half of it
// when shorter; an aligned split's wait for its parent's own flush is in
// neither window); the split window is [WindowStart, WindowEnd); After is
// [WindowEnd, AfterEnd): up to AfterWindow, or to the load's end; the
// second after the handoff is [WindowEnd, HandoffEnd).
type Windows struct {
	SteadyFrom, AfterEnd, HandoffEnd time.Duration
}

// WindowsOf returns o's windows.
func WindowsOf(o *Outcome) Windows {
	return Windows{
		SteadyFrom: min(time.Second, o.SteadyEnd()/2),
		AfterEnd:   min(o.WindowEnd+AfterWindow, o.End),
		HandoffEnd: min(o.WindowEnd+time.Second, o.End),
	}
}

// Summarize computes a strategy's measures. The split window runs from
// the split request to the end of the last phase writers wait on; the
// steady window is the writes before it, after a one-second warm-up.
func Summarize(o *Outcome) Summary {
	recs := o.Load.Records
	in := loadgen.SummarizeOverlap(recs, o.WindowStart, o.WindowEnd)
	win := WindowsOf(o)
	steadyFrom, afterEnd, handoffEnd := win.SteadyFrom, win.AfterEnd, win.HandoffEnd
	steady := loadgen.Summarize(recs, steadyFrom, o.SteadyEnd())
	all := loadgen.Summarize(recs, 0, o.End+time.Hour)
	m := Summary{
		MaxWriteStallMs:          ms(loadgen.MaxStall(recs, o.WindowStart, o.WindowEnd)),
		WriteP50Ms:               ms(in.P50),
		WriteP99Ms:               ms(in.P99),
		WriteMaxMs:               ms(in.Max),
		ThroughputSteadyOps:      steady.OpsPerS,
		ThroughputDuringSplitOps: in.OpsPerS,
		SplitDurationMs:          ms(o.WindowEnd - o.WindowStart),
		WriteErrors:              all.Errors,
		WriteRetries:             all.Retries,
		AckedWrites:              all.Acked,
		LostWrites:               o.Verify.Lost + o.Verify.Unexpected,
		MisplacedDocs:            o.Verify.Misplaced,
		DuplicateDocs:            o.Verify.Duplicates,
		BytesWritten:             o.BytesWritten,
		DiskBeforeBytes:          o.DiskBefore,
		DiskPeakBytes:            o.DiskPeak,
		DiskAfterBytes:           o.DiskAfter,

		Steady1sStallMs:           ms(MedianStall(recs, steadyFrom, o.SteadyEnd())),
		SteadyWindowStallMs:       ms(SteadyWindowStall(recs, steadyFrom, o.SteadyEnd(), o.WindowEnd-o.WindowStart)),
		WriteP99FirstSecondMs:     ms(IssuedP99(recs, o.SteadyEnd(), min(o.SteadyEnd()+time.Second, o.End))),
		WriteP99SteadySecondMs:    ms(MedianSecondP99(recs, steadyFrom, o.SteadyEnd())),
		AfterHandoffStallMs:       ms(loadgen.MaxStall(recs, o.WindowEnd, handoffEnd)),
		ThroughputAfterHandoffOps: loadgen.Summarize(recs, o.WindowEnd, handoffEnd).OpsPerS,

		CleanupDurationMs:   ms(o.CleanupEnd - o.CleanupStart),
		CleanupBytesWritten: o.CleanupWritten,
		CleanupDocsDeleted:  o.CleanupDeleted,
		CleanupDocsMarked:   o.CleanupMarked,
		CleanupWriteP99Ms:   ms(loadgen.SummarizeOverlap(recs, o.CleanupStart, o.CleanupEnd).P99),
		ReclaimMs:           ms(Reclaimed(o)),
		MergeDurationMs:     ms(o.MergeEnd - o.MergeStart),
		MergeBytesWritten:   o.MergeWritten,
		LuceneMergeBytes:    o.LuceneMergeBytes,
		AlignWaitMs:         ms(o.AlignWait),
		Aligned:             o.Aligned,
	}
	if o.CleanupEnd <= o.CleanupStart {
		m.CleanupWriteP99Ms = 0
	}
	if o.MergeEnd > o.MergeStart {
		m.MergeWriteP99Ms = ms(loadgen.SummarizeOverlap(recs, o.MergeStart, o.MergeEnd).P99)
	}
	if r := o.Reads; r != nil {
		gets, searches := r.Of(loadgen.ReadGet), r.Of(loadgen.ReadSearch)
		m.GetP99SteadyMs = ms(loadgen.Summarize(gets, steadyFrom, o.SteadyEnd()).P99)
		m.GetP99DuringMs = ms(loadgen.SummarizeOverlap(gets, o.WindowStart, o.WindowEnd).P99)
		m.GetP99AfterMs = ms(loadgen.Summarize(gets, o.WindowEnd, afterEnd).P99)
		m.SearchP99SteadyMs = ms(loadgen.Summarize(searches, steadyFrom, o.SteadyEnd()).P99)
		m.SearchP99DuringMs = ms(loadgen.SummarizeOverlap(searches, o.WindowStart, o.WindowEnd).P99)
		m.SearchP99AfterMs = ms(loadgen.Summarize(searches, o.WindowEnd, afterEnd).P99)
		m.CountP99Ms = ms(loadgen.Summarize(r.Of(loadgen.ReadCount), 0, o.End+time.Hour).P99)
		if o.CleanupEnd > o.CleanupStart {
			m.CleanupSearchP99Ms = ms(loadgen.SummarizeOverlap(searches, o.CleanupStart, o.CleanupEnd).P99)
		}
		m.Reads = len(r.Records)
		for _, x := range r.Records {
			if !x.OK {
				m.ReadErrors++
			}
		}
		m.ReadForeignDocs = r.Foreign
	}
	return m
}

// MedianStall is the median over the whole one-second windows of
// [from, to) of each window's longest stall (the whole interval's if it
// holds no whole second).
func MedianStall(recs []loadgen.Record, from, to time.Duration) time.Duration {
	var stalls []time.Duration
	for at := from; at+time.Second <= to; at += time.Second {
		stalls = append(stalls, loadgen.MaxStall(recs, at, at+time.Second))
	}
	if len(stalls) == 0 {
		return loadgen.MaxStall(recs, from, to)
	}
	slices.Sort(stalls)
	return stalls[len(stalls)/2]
}

// SteadyWindowStall is the median, over the windows of length w in
// [from, to) stepped by w/2, of each window's longest stall: what the stall
// measure reads in a window as long as the split's with no split running.
// The median, not the longest: the split window is one window, and the
// longest of many steady windows grows with their number. A window longer
// than [from, to) is cut to it (one window, the whole span).
func SteadyWindowStall(recs []loadgen.Record, from, to, w time.Duration) time.Duration {
	w = min(w, to-from)
	var stalls []time.Duration
	for at := from; w > 0 && at+w <= to; at += max(w/2, 1) {
		stalls = append(stalls, loadgen.MaxStall(recs, at, at+w))
	}
	if len(stalls) == 0 {
		return 0
	}
	slices.Sort(stalls)
	return stalls[len(stalls)/2]
}

// IssuedP99 is the 99th percentile latency of the acknowledged writes aimed
// at the moved documents that were issued in [from, to): what a client
// sending such a write then waited, however long after to it was answered.
func IssuedP99(recs []loadgen.Record, from, to time.Duration) time.Duration {
	var in []loadgen.Record
	for _, r := range recs {
		if r.Moving && r.Start >= from && r.Start < to {
			in = append(in, r)
		}
	}
	return loadgen.Summarize(in, 0, 1<<62).P99
}

// MedianSecondP99 is the median, over the whole seconds of [from, to), of
// each second's IssuedP99 (the whole interval's if it holds no whole
// second).
func MedianSecondP99(recs []loadgen.Record, from, to time.Duration) time.Duration {
	var p99s []time.Duration
	for at := from; at+time.Second <= to; at += time.Second {
		p99s = append(p99s, IssuedP99(recs, at, at+time.Second))
	}
	if len(p99s) == 0 {
		return IssuedP99(recs, from, to)
	}
	slices.Sort(p99s)
	return p99s[len(p99s)/2]
}

// ReclaimTolerance is how far above the settled size the disk may be and
// count as reclaimed.
const ReclaimTolerance = 0.10

// Reclaimed is the time from the split request (Outcome.SteadyEnd: an
// aligned split's wait for its parent's own flush is in it) to the first
// disk sample after which every sample stays within ReclaimTolerance of
// the settled size (the last sample); 0 if none after the request exceeds
// it.
func Reclaimed(o *Outcome) time.Duration {
	limit := float64(o.DiskAfter) * (1 + ReclaimTolerance)
	req := o.SteadyEnd()
	var at time.Duration
	for i, s := range o.Disk {
		if s.At > req && float64(s.Bytes) > limit && i+1 < len(o.Disk) {
			at = o.Disk[i+1].At - req
		}
	}
	return at
}
