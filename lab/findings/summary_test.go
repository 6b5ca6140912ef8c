package findings

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/lab/clusterbench"
	"github.com/shardsplit/shardsplit/lab/crashpoint"
	"github.com/shardsplit/shardsplit/storage"
)

// realisticSummaries builds every question's Summary from values of the
// size a full run measures (the full run's cases and names, medians of the
// order design/findings.md reports), keyed by question id.
func realisticSummaries() map[int]string {
	cfg := Config{}
	base, _ := cfg.handoffCases()
	held := base
	held.Hold = true
	small, large := cfg.parentSizes()

	cells := searchCells{}
	for i, st := range strategies {
		cells[st] = map[string]map[string]readCell{}
		for _, k := range readKinds {
			cells[st][k.String()] = map[string]readCell{
				"steady": {P50: 0.4, P99: 12.5, N: 5000, Runs: 5},
				"during": {P50: 0.5, P99: 6.5 * float64(i+1), N: 60, Runs: 5},
				"after":  {P50: 0.4, P99: 13.25, N: 9000, Runs: 5},
			}
		}
	}
	var routeCells []*routeCell
	for _, ns := range [][]float64{{36.2, 37.1}, {77.9, 78.4}} {
		routeCells = append(routeCells, &routeCell{ns: ns})
	}
	lo, hi := routeCostRange(routeCells)
	scaleRows := []scaleRow{
		{Case: splitCase{Layout: storage.LayoutPerShard, Size: small, Rate: 5000, Ways: 2}, ParentMiB: 103, Window: 103.4, Stall: 11.5, Steady: 7.25},
		{Case: splitCase{Layout: storage.LayoutPerShard, Size: size{"4 GiB", 4 << 20}, Rate: 5000, Ways: 2}, ParentMiB: 4180, Window: 1755.2, Stall: 181.3, Steady: 10.75},
	}
	mergeRows := []mergeRow{
		{Case: splitCase{Layout: storage.LayoutPerShard, Size: large, Rate: 5000, Ways: 2, Merge: true}, Window: 4712.5, Stall: 21.25, Steady: 9.125, Tput: 0.99},
		{Case: splitCase{Layout: storage.LayoutShared, Size: large, Rate: 5000, Ways: 2, Merge: true}, Window: 5.125, Stall: 3.25, Steady: 2.125, Tput: 1},
	}
	tally := crashTally{Points: 4729, Failed: 0, Scenarios: 36, ByOp: map[string]int{crashpoint.OpSplit: 2000}, Recovered: map[string]int{}}
	sums := clusterbench.SummarizeSplit(replicatedRuns())
	return map[int]string{
		1: handoffSummary(base, []handoffRow{
			{Case: base, Stall: 6.625, Steady: 4.53, Node: 0.0215, Window: 81.3, TputRate: 0.97},
			{Case: held, Stall: 12.75, Steady: 4.79, Node: 1.59, Window: 58.2, TputRate: 0.93},
		}),
		2: cleanupSummary([]cleanupRow{
			{Strategy: "inplace", DurationMs: 12.25, WrittenMiB: 0.0525},
			{Strategy: "rfc", DurationMs: 4125.5, WrittenMiB: 681.25, Deleted: 131072, SearchP99Steady: 1.25, SearchP99Cleanup: 10.125},
			{Strategy: "newindex", DurationMs: 3521.75, WrittenMiB: 512.5, Deleted: 131072},
		}),
		3: searchSummary(cells),
		4: diskSummary([]diskRow{
			{Strategy: "inplace", ExtraAtPeak: 0.125}, {Strategy: "rfc", ExtraAtPeak: 1.0925}, {Strategy: "newindex", ExtraAtPeak: 0.8525},
		}),
		5: afterSummary(afterRow{Name: base.String(), Steady1s: 9.125, After: 6.5625, Retire: 21.25, StallRatio: 0.72, TputRatio: 1.00}),
		6: childrenSummary(childrenFacts{DepthPartition: 7, DepthHash: 22, PartitionSize: 8, SpreadPartition: 7.85, SpreadHash: 7.98,
			HotShare: 0.3, HotPartition: 0.3125, HotHash: 0.3075, SplitsPartition: 7, SplitsHash: 22}),
		7:  routeCostSummary(lo, hi, 0),
		8:  staleSummary(staleFacts{Fenced: 16, MaxRetries: 1, WorstBehind: 3, WorstRetries: 1, ClientWrong: 12.675}),
		9:  crashSummary(tally, 5, 5, 5, nil),
		10: mergeSummary(mergeRows),
		11: scaleSummary(scaleRows),
		12: idSummary(idFacts{UnroutedCPU: 0.9125, RoutedCPU: 6.3125, RoutedFsync: 0.7925, ShardMiB: 56.25, SplitOff: 54.5, SplitIndex: 194.25}),
		13: replicatedSummary(replicatedCase{Parent: size{"1 GiB", 1 << 20}, Rate: 5000}, sums, Measured("lock", "ms", 0.5)),
	}
}

// Every question's Summary, built from realistic measured values, is one
// line of at most SummaryWords words that quotes numbers.
func TestEverySummaryIsShortAndQuotesNumbers(t *testing.T) {
	got := realisticSummaries()
	for _, q := range Questions() {
		s, ok := got[q.ID]
		t.Logf("%d (%d words): %s", q.ID, words(s), s)
		switch {
		case !ok || s == "":
			t.Errorf("question %d has no summary builder in this test", q.ID)
		case words(s) > SummaryWords:
			t.Errorf("question %d's summary has %d words (at most %d):\n%s", q.ID, words(s), SummaryWords, s)
		case strings.Contains(s, "\n"):
			t.Errorf("question %d's summary spans lines:\n%s", q.ID, s)
		case !strings.ContainsAny(s, "0123456789"):
			t.Errorf("question %d's summary quotes no number:\n%s", q.ID, s)
		}
	}
}

// summaryRows are the rows of the report's Summary table, header and
// separator left out.
func summaryRows(t *testing.T, md string) [][]string {
	t.Helper()
	i := strings.Index(md, "\n## Summary\n")
	if i < 0 {
		t.Fatalf("report has no Summary section:\n%s", md)
	}
	var rows [][]string
	for n, line := range strings.Split(md[i:], "\n")[3:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if n < 2 {
			continue // header and separator
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	return rows
}

// The Summary table has one row per question, each answer at most
// SummaryWords words; a question that failed or did not run says so.
func TestSummaryTableHasOneShortRowPerQuestion(t *testing.T) {
	r := &Report{Started: time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC), Runs: 5, Seed: 1, Machine: Machine(), Commit: "abc1234", Command: "splitdemo findings"}
	sums := realisticSummaries()
	for _, q := range Questions() {
		a := Answer{ID: q.ID, Title: q.Title, Summary: sums[q.ID]}
		switch q.ID {
		case 4:
			a.Error, a.Summary = errors.New("disk full: a long error message "+strings.Repeat("word ", 80)).Error(), ""
		case 9:
			continue // not run
		}
		r.Answers = append(r.Answers, a)
	}
	rows := summaryRows(t, r.Markdown(""))
	if len(rows) != len(Questions()) {
		t.Fatalf("Summary table has %d rows, want one per question (%d): %q", len(rows), len(Questions()), rows)
	}
	for i, row := range rows {
		if len(row) != 3 {
			t.Fatalf("row %d has %d cells: %q", i+1, len(row), row)
		}
		if w := words(row[2]); w > SummaryWords {
			t.Errorf("question %s's Summary row has %d words (at most %d): %s", row[0], w, SummaryWords, row[2])
		}
	}
	if !strings.Contains(rows[3][2], "failed") || !strings.Contains(rows[8][2], "Not run") {
		t.Errorf("rows 4 and 9 do not say the question failed / did not run: %q, %q", rows[3][2], rows[8][2])
	}
}

// The header names the commit, the command, the machine (CPU, RAM, Go,
// Pebble) and the load average at the start and at the end.
func TestReportHeaderNamesCommitAndMachine(t *testing.T) {
	r := &Report{Started: time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC), Runs: 5, Seed: 7, Seconds: 3725,
		Commit: "abc1234 (modified)", Command: "splitdemo findings --big --out design/findings --report design/findings.md",
		Machine: map[string]any{"cpu_model": "AMD EPYC", "cpus": 2, "ram_gib": 23.5, "goos": "linux", "goarch": "amd64",
			"go": "go1.26.8", "pebble": "v2.1.7", "load_avg_start": "0.10 0.20 0.30", "load_avg_end": "1.50 1.20 0.90"}}
	md := r.Markdown("findings/")
	header := md[:strings.Index(md, "This answers")]
	for _, want := range []string{"# In-place shard split: findings for the RFC", "commit abc1234 (modified)", "2026-12-07 21:00 UTC",
		"`splitdemo findings --big --out design/findings --report design/findings.md`", "1 h 2 min 5 s", "AMD EPYC", "2 CPUs", "23.5 GiB RAM",
		"linux/amd64", "Go 1.26.8", "Pebble v2.1.7", "0.10 0.20 0.30 at the start", "1.50 1.20 0.90 at the end", "5 run(s) per timing", "seed 7"} {
		if !strings.Contains(header, want) {
			t.Errorf("header lacks %q:\n%s", want, header)
		}
	}
	r.Commit = ""
	if md := r.Markdown(""); !strings.Contains(md, "shardsplit at an unknown commit,") {
		t.Errorf("a report without a commit does not say so:\n%s", md[:300])
	}
}

// The method section defines the summary.json keys the sections quote,
// with summary.json's own definitions, and links findings.json through
// the prefix given.
func TestReportMethodDefinesSummaryKeys(t *testing.T) {
	md := (&Report{Runs: 5, Machine: map[string]any{}}).Markdown("findings/")
	for _, key := range summaryKeyNames {
		if !strings.Contains(md, "- `"+key+"`: ") {
			t.Errorf("method section does not define %s", key)
		}
	}
	if len(summaryKeys) != len(summaryKeyNames) {
		t.Errorf("%d of %d keys found in experiment.SummaryKeyDocs", len(summaryKeys), len(summaryKeyNames))
	}
	if !strings.Contains(md, "(findings/findings.json)") || !strings.Contains(md, "**median of 5 runs**") {
		t.Errorf("method section lacks the findings.json link or the runs:\n%s", md)
	}
	if strings.Contains(md, "Since 20") || regexp.MustCompile(`(?i)issue \d`).MatchString(md) {
		t.Errorf("method section narrates history")
	}
}

// The report's Goals table gathers every question's goals with the reason
// a goal is not met.
func TestReportGoalsTable(t *testing.T) {
	r := &Report{Machine: map[string]any{}, Answers: []Answer{
		{ID: 1, Goals: []Goal{{Goal: "stall ≤ 1.25×", Measured: "1.46×", Why: "1.46 is above 1.25"}}},
		{ID: 3, Goals: []Goal{{Goal: "search p99 ≤ 1.25×", Measured: "0.52×", Met: true}}},
	}}
	md := r.Markdown("")
	goals := md[strings.Index(md, "## Goals"):]
	for _, want := range []string{"| 1 | stall ≤ 1.25× | 1.46× | **no**: 1.46 is above 1.25 |", "| 3 | search p99 ≤ 1.25× | 0.52× | yes |"} {
		if !strings.Contains(goals, want) {
			t.Errorf("Goals table lacks %q:\n%s", want, goals)
		}
	}
}

func TestMachineFactsParse(t *testing.T) {
	if got := cpuModel("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nmodel name\t: other\n"); got != "AMD EPYC 7B13" {
		t.Errorf("cpuModel = %q", got)
	}
	if got, ok := memTotalKiB("MemTotal:       24683772 kB\nMemFree: 1 kB\n"); !ok || got != 24683772 {
		t.Errorf("memTotalKiB = %d, %v", got, ok)
	}
	if got := loadFields("6.36 2.77 1.90 12/176 16722\n"); got != "6.36 2.77 1.90" {
		t.Errorf("loadFields = %q", got)
	}
	m := Machine()
	for _, k := range []string{"cpu_model", "cpus", "ram_gib", "go", "pebble", "goos", "goarch", "load_avg_start"} {
		if _, ok := m[k]; !ok {
			t.Errorf("Machine() lacks %s: %v", k, m)
		}
	}
}

// The report's links to the charts and findings.json resolve from the
// report's directory: none when it sits in Out, relative otherwise.
func TestReportLinksResolveFromItsDirectory(t *testing.T) {
	for _, tc := range []struct{ report, out, want string }{
		{"design/findings.md", "design/findings", "findings/"},
		{"out/findings.md", "out", ""},
		{"doc/r.md", "out", "../out/"},
	} {
		if got := linkPrefix(tc.report, tc.out); got != tc.want {
			t.Errorf("linkPrefix(%q, %q) = %q, want %q", tc.report, tc.out, got, tc.want)
		}
	}
	dir := t.TempDir()
	out, report := filepath.Join(dir, "design", "findings"), filepath.Join(dir, "design", "findings.md")
	q := Question{ID: 1, Slug: "a", Title: "A", Question: "a?", RaisedIn: "here", Run: func(ctx context.Context, cfg Config) (Answer, error) {
		return Answer{Summary: "1 ms", Charts: []string{"q01-a.png"}}, nil
	}}
	if _, err := Run(context.Background(), Config{Out: out, Report: report, Command: "splitdemo findings --only 1"}, []Question{q}); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"](findings/q01-a.png)", "](findings/findings.json)", "`splitdemo findings --only 1`", "| 1 | Write pause at the handoff | 1 ms |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "findings.json")); err != nil {
		t.Errorf("findings.json not in --out: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "findings.md")); err == nil {
		t.Errorf("a second report written into --out beside the one asked for")
	}
}

// The commit comes from the build's VCS stamp, short, marked when the tree
// had changes; without a stamp git is asked, and outside a repository the
// report says the commit is unknown.
func TestCommitNames(t *testing.T) {
	rev := "d9085661234567890abcdef"
	if got := commitOf([]debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}); got != "d908566 (modified)" {
		t.Errorf("commitOf(modified) = %q", got)
	}
	if got := commitOf([]debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}); got != "d908566" {
		t.Errorf("commitOf(clean) = %q", got)
	}
	if got := commitOf(nil); got != "" {
		t.Errorf("commitOf(no stamp) = %q, want none (git is asked)", got)
	}
	t.Chdir(t.TempDir())
	if got := gitCommit(context.Background()); got != unknownCommit {
		t.Errorf("gitCommit outside a repository = %q, want %q", got, unknownCommit)
	}
}
