package findings

import "github.com/shardsplit/shardsplit/lab/experiment"

// intro is the report's opening: what it answers and the three strategies
// it measures.
const intro = `This answers, with numbers anyone can rerun, the questions the in-place split RFC
argues about: opensearch-project/OpenSearch#13925 (routing), #12918 and #13923
(design), with the metadata merged in #20859/#20979. shardsplit is a Go prototype:
one process (question 13: three), Pebble stores keyed by partition, OpenSearch's
routing to the bit. It measures three ways to split one shard in two under
continuous fsync'd writes:

- **inplace**: ours. Children are hard-linked checkpoints of the parent, each
  *excised* to its own key span at creation (Pebble's ` + "`Excise`" + `: milliseconds, no
  rewrite); a fenced handoff of about a millisecond publishes the new routing table.
- **rfc**: the RFC's data path. Children are hard-linked copies of the *whole*
  parent; after the same handoff each child removes its foreign documents in the
  background (as ` + "`ShardSplittingQuery`" + ` does) and compaction reclaims them.
- **newindex**: today's ` + "`_split`" + `: block writes, hard-link into a new index, delete
  the foreign documents, swap the alias. The source index stays blocked after the
  swap: a write that resolved the alias before the swap is refused and retried
  through the alias, so none is acknowledged by an index the alias no longer reaches.
`

// method is the report's "How to read the numbers" section; its verbs
// take the runs per timing and the link to findings.json.
const method = `Each timing is the **median of %d runs** with its **[min–max]**; every per-run
value is in [findings.json](%s). The *stall* is the longest any write aimed at the
parent's keys waited to be acknowledged inside a window; the *steady* stall is the
same measure over windows of the same length in the steady window before the split
request (2 s after a warm-up; 1 s in a quick run), in the same run: the disk's own
fsync noise. The *split window* runs from the split request to the end of the
handoff. Writers: 64, staggered, 5,000 fsync'd writes/s of 1 KiB documents unless a
row says otherwise. Every section ends with the command that reproduces it
(` + "`splitdemo findings --only N`" + `; add ` + "`--big`" + ` for the 4 GiB parent) and what was
not measured.

The keys of ` + "`splitdemo compare`" + `'s and ` + "`splitdemo run`" + `'s summary.json that the
sections quote:
`

// summaryKeyNames are the summary.json keys the method section defines.
var summaryKeyNames = []string{"steady_window_stall_ms", "write_p99_first_second_ms", "write_p99_steady_second_ms"}

type keyDef struct{ key, def string }

// summaryKeys are those keys with summary.json's own definitions
// (experiment.SummaryKeyDocs), so the report and summary.json cannot
// disagree.
var summaryKeys = func() []keyDef {
	var out []keyDef
	for _, name := range summaryKeyNames {
		for _, d := range experiment.SummaryKeyDocs {
			if d[0] == name {
				out = append(out, keyDef{name, d[1]})
			}
		}
	}
	return out
}()
