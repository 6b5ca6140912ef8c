// Package findings runs the experiment set behind design/findings.md: one
// experiment per question the in-place split RFC argues about
// (opensearch-project/OpenSearch#13925 and its trail), each answered with
// numbers anyone can rerun.
//
// A Question is a constructor and a Run function; Run measures (Config.Runs
// repetitions where a number is a timing) and returns an Answer: the
// numbers with their medians and ranges, a one-line Summary, charts written
// into Config.Out, the command that reproduces it and what it did not
// measure. Run (the package function) runs a set of questions in order,
// writes findings.json into Config.Out and the whole report (Report.Markdown,
// the document committed as design/findings.md) to Config.Report, and stops
// cleanly when its context is cancelled: the questions answered so far are
// written.
package findings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.uber.org/zap"
)

// Config is what every question's experiment gets.
type Config struct {
	// Quick runs smaller data and fewer repetitions: a smoke test (CI), not
	// numbers to quote.
	Quick bool
	// Out is the directory the charts and findings.json go to.
	Out string
	// Report is the file the report (Markdown) is written to; "" means
	// findings.md in Out. Its links to the charts and findings.json are
	// relative from its directory to Out.
	Report string
	// Command is the command line the report's header names ("" = the
	// package's default, "splitdemo findings" with the quick flag).
	Command string
	// Runs is how many times a timed measurement is repeated (medians of
	// Runs); 0 means the default: 5, or 2 when Quick.
	Runs int
	// Big adds the 4 GiB parent to question 11 (not with Quick): building
	// it and three runs take ~15 minutes on a loaded 2-core machine, which
	// the full set's hour has no room for.
	Big bool
	// Seed makes the workloads reproducible.
	Seed int64
	// Scratch is where experiments build their data directories (default:
	// a temporary directory under os.TempDir, removed afterwards).
	Scratch string
	Logger  *zap.Logger
	// Progress receives one human-readable line per step (stderr in the
	// CLI); nil discards.
	Progress func(msg string)
	// Binary is the splitdemo executable (question 9 kills its 'run' with
	// SIGKILL and checks what it left with its 'verify'); "" = those runs
	// are not made, and the answer says so.
	Binary string

	// shared holds what questions share within one Run: datasets built
	// once, and measured runs another question can reuse (set by Run).
	shared *shared
}

// runs is the number of repetitions a timed measurement makes.
func (c Config) runs() int {
	if c.Runs > 0 {
		return c.Runs
	}
	if c.Quick {
		return 2
	}
	return 5
}

// Progressf reports one step.
func (c Config) Progressf(format string, args ...any) {
	if c.Progress != nil {
		c.Progress(fmt.Sprintf(format, args...))
	}
}

// Number is one measured quantity: every run's value and their median and
// range.
type Number struct {
	Name   string    `json:"name"`
	Unit   string    `json:"unit"`
	Values []float64 `json:"values"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
}

// Measured makes a Number from its values (at least one).
func Measured(name, unit string, values ...float64) Number {
	n := Number{Name: name, Unit: unit, Values: slices.Clone(values)}
	if len(values) == 0 {
		return n
	}
	s := slices.Clone(values)
	slices.Sort(s)
	n.Min, n.Max = s[0], s[len(s)-1]
	if len(s)%2 == 1 {
		n.Median = s[len(s)/2]
	} else {
		n.Median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return n
}

// Table is a small table for the markdown (a header and rows of cells).
type Table struct {
	Header []string   `json:"header"`
	Rows   [][]string `json:"rows"`
}

// Answer is one question's result.
type Answer struct {
	ID       int    `json:"id"`
	Slug     string `json:"slug"`
	Title    string `json:"title"`
	Question string `json:"question"`
	RaisedIn string `json:"raised_in"`
	// Answer is the answer in one or two sentences, written from the
	// numbers (not fixed text).
	Answer string `json:"answer"`
	// Summary is the answer in one line of at most SummaryWords words,
	// written from the same numbers: the report's Summary table row.
	Summary string   `json:"summary,omitempty"`
	Numbers []Number `json:"numbers"`
	Tables  []Table  `json:"tables,omitempty"`
	// Charts are file names in Config.Out.
	Charts      []string `json:"charts,omitempty"`
	Command     string   `json:"command"`
	NotMeasured string   `json:"not_measured"`
	// Goals are the project's performance goals this question measures,
	// each met or not with the reason.
	Goals []Goal `json:"goals,omitempty"`
	// Error is set when the experiment failed; the other fields may be
	// partial.
	Error string `json:"error,omitempty"`
	// NotBuilt is set when the question's experiment does not exist yet
	// (ErrNotBuilt): not answered, but not a failure either.
	NotBuilt bool    `json:"not_built,omitempty"`
	Seconds  float64 `json:"seconds"`
	// From is the earlier run an answer was carried over from (Run keeps
	// the answers of the questions it did not run); nil for an answer
	// measured by the report's own run.
	From *Origin `json:"from,omitempty"`
}

// Origin names the run an answer was measured in: what the report's
// header says of its own run.
type Origin struct {
	Commit    string    `json:"commit"`
	Started   time.Time `json:"started"`
	Command   string    `json:"command"`
	Runs      int       `json:"runs"`
	Seed      int64     `json:"seed"`
	LoadStart any       `json:"load_avg_start,omitempty"`
	LoadEnd   any       `json:"load_avg_end,omitempty"`
}

// origin is r's run as an Origin.
func (r *Report) origin() *Origin {
	return &Origin{Commit: r.Commit, Started: r.Started, Command: r.Command, Runs: r.Runs, Seed: r.Seed,
		LoadStart: r.Machine["load_avg_start"], LoadEnd: r.Machine["load_avg_end"]}
}

// Goal is a performance goal and whether the measurement met it.
type Goal struct {
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
	Why      string `json:"why,omitempty"` // why not, when not met
}

// Question is one experiment.
type Question struct {
	ID       int
	Slug     string // file-name friendly: charts are named after it
	Title    string
	Question string
	RaisedIn string
	Run      func(ctx context.Context, cfg Config) (Answer, error)
}

// ErrNotBuilt is returned by a question whose experiment does not exist yet.
var ErrNotBuilt = errors.New("findings: experiment not built yet")

// Report is the whole set.
type Report struct {
	Started time.Time `json:"started"`
	// Command is the command line that made the report.
	Command string `json:"command"`
	// Commit is the source's commit (short), "(modified)" when the tree
	// had changes, or "unknown commit".
	Commit  string         `json:"commit"`
	Quick   bool           `json:"quick"`
	Runs    int            `json:"runs"`
	Seed    int64          `json:"seed"`
	Machine map[string]any `json:"machine"`
	Answers []Answer       `json:"answers"`
	Seconds float64        `json:"seconds"`
	// Interrupted is set when the context was cancelled before every
	// question ran.
	Interrupted bool `json:"interrupted,omitempty"`
}

// Failed lists the questions whose experiment returned an error (not one
// that is not built yet).
func (r *Report) Failed() []int {
	var ids []int
	for _, a := range r.Answers {
		if a.Error != "" && !a.NotBuilt {
			ids = append(ids, a.ID)
		}
	}
	return ids
}

// NotBuilt lists the questions whose experiment does not exist yet.
func (r *Report) NotBuilt() []int {
	var ids []int
	for _, a := range r.Answers {
		if a.NotBuilt {
			ids = append(ids, a.ID)
		}
	}
	return ids
}

// Select returns the questions with the given ids in the order of
// Questions (all of them when ids is empty); an unknown or repeated id is
// an error naming it.
func Select(ids []int) ([]Question, error) {
	all := Questions()
	if len(ids) == 0 {
		return all, nil
	}
	want := map[int]bool{}
	for _, id := range ids {
		if id < 1 || id > len(all) {
			return nil, fmt.Errorf("findings: no question %d (questions are 1 to %d)", id, len(all))
		}
		if want[id] {
			return nil, fmt.Errorf("findings: question %d named twice", id)
		}
		want[id] = true
	}
	var qs []Question
	for _, q := range all {
		if want[q.ID] {
			qs = append(qs, q)
		}
	}
	return qs, nil
}

// Run runs qs in order and writes findings.json into cfg.Out and the
// report to cfg.Report (default findings.md in cfg.Out), also when ctx is
// cancelled part way. A question that fails is
// recorded with its error and the others still run.
//
// A question this run does not answer keeps its answer from the
// findings.json already in cfg.Out, if one of the same kind (quick or
// not) is there, marked with the run it came from: `--only 13` then
// regenerates section 13 of a whole report and leaves the others as they
// were measured.
func Run(ctx context.Context, cfg Config, qs []Question) (*Report, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Out == "" {
		return nil, errors.New("findings: no output directory")
	}
	earlier, err := readEarlier(cfg.Out, cfg.Quick)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, fmt.Errorf("findings: %w", err)
	}
	if cfg.Scratch == "" {
		dir, err := os.MkdirTemp("", "findings-")
		if err != nil {
			return nil, fmt.Errorf("findings: scratch directory: %w", err)
		}
		defer os.RemoveAll(dir)
		cfg.Scratch = dir
	}
	cfg.shared = newShared(filepath.Join(cfg.Scratch, "datasets"))
	defer os.RemoveAll(cfg.shared.dir)
	start := time.Now()
	command := cfg.Command
	if command == "" {
		command = "splitdemo findings" + map[bool]string{true: " --quick", false: ""}[cfg.Quick]
	}
	r := &Report{Started: start.UTC(), Command: command, Commit: Commit(ctx), Quick: cfg.Quick, Runs: cfg.runs(), Seed: cfg.Seed, Machine: Machine()}
	for i, q := range qs {
		if ctx.Err() != nil {
			r.Interrupted = true
			break
		}
		cfg.Progressf("[%d/%d] question %d: %s", i+1, len(qs), q.ID, q.Title)
		qstart := time.Now()
		qcfg := cfg
		qcfg.Scratch = filepath.Join(cfg.Scratch, q.Slug)
		if err := os.MkdirAll(qcfg.Scratch, 0o755); err != nil {
			return r, fmt.Errorf("findings: %w", err)
		}
		a, err := q.Run(ctx, qcfg)
		os.RemoveAll(qcfg.Scratch)
		a.ID, a.Slug, a.Title, a.Question, a.RaisedIn = q.ID, q.Slug, q.Title, q.Question, q.RaisedIn
		a.Seconds = time.Since(qstart).Seconds()
		if err != nil {
			if ctx.Err() != nil {
				r.Interrupted = true
			}
			a.Error = err.Error()
			a.NotBuilt = errors.Is(err, ErrNotBuilt)
			if a.NotBuilt {
				cfg.Logger.Info("question not built", zap.Int("question", q.ID))
				cfg.Progressf("question %d: not built yet", q.ID)
			} else {
				cfg.Logger.Warn("question failed", zap.Int("question", q.ID), zap.Error(err))
				cfg.Progressf("question %d failed: %v", q.ID, err)
			}
		}
		r.Answers = append(r.Answers, a)
	}
	r.Seconds = time.Since(start).Seconds()
	r.Machine["load_avg_end"] = loadAverage()
	r.carryOver(earlier)
	if err := r.write(cfg.Out, cfg.reportFile()); err != nil {
		return r, err
	}
	return r, nil
}

// readEarlier reads the report a previous run left in out: nil when there
// is none or it is of the other kind (quick or not), an error naming the
// file when it cannot be read, so that a run never writes over answers it
// could not carry.
func readEarlier(out string, quick bool) (*Report, error) {
	file := filepath.Join(out, "findings.json")
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("findings: the earlier answers in %s: %w", file, err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("findings: the earlier answers in %s do not decode (move the file away to start afresh): %w", file, err)
	}
	if r.Quick != quick {
		return nil, nil
	}
	return &r, nil
}

// carryOver adds to r the answers of earlier to questions r did not answer
// (each keeping the run it was measured in), in question order. A
// question that no longer exists, or that earlier did not answer either,
// is not carried.
func (r *Report) carryOver(earlier *Report) {
	if earlier == nil {
		return
	}
	ran := map[int]bool{}
	for _, a := range r.Answers {
		ran[a.ID] = true
	}
	exists := map[int]bool{}
	for _, q := range Questions() {
		exists[q.ID] = true
	}
	for _, a := range earlier.Answers {
		if ran[a.ID] || !exists[a.ID] || a.Error != "" || a.NotBuilt {
			continue
		}
		if a.From == nil {
			a.From = earlier.origin()
		}
		r.Answers = append(r.Answers, a)
	}
	slices.SortStableFunc(r.Answers, func(a, b Answer) int { return a.ID - b.ID })
}

// reportFile is where the report goes.
func (c Config) reportFile() string {
	if c.Report != "" {
		return c.Report
	}
	return filepath.Join(c.Out, "findings.md")
}

// linkPrefix is what the report at file puts before a file name in dir
// (the charts, findings.json) for the link to resolve from the report's
// directory: "" when the report is in dir.
func linkPrefix(file, dir string) string {
	from, err1 := filepath.Abs(filepath.Dir(file))
	to, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return ""
	}
	rel, err := filepath.Rel(from, to)
	if err != nil || rel == "." {
		return ""
	}
	return filepath.ToSlash(rel) + "/"
}

func (r *Report) write(dir, report string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("findings: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "findings.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("findings: %w", err)
	}
	if err := os.WriteFile(report, []byte(r.Markdown(linkPrefix(report, dir))), 0o644); err != nil {
		return fmt.Errorf("findings: %w", err)
	}
	return nil
}
