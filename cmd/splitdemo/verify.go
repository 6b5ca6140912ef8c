package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/model"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

const verifyUsage = `splitdemo verify: recover a data directory and check it.

Usage:
  splitdemo verify --data DIR [--acked FILE] [--json]

Recovers DIR (finishing or rolling back any split or merge a crash
interrupted), then checks: the routing table is valid with no split or merge
in progress; the journal agrees with it; every shard store holds only keys of its span; no
document is in two live shards and every document is on the shard the table
names. With --acked (the write log of 'splitdemo run'), every id in it must
be in the state of its last acknowledged write, or of a write attempted
after it (in flight at a crash); deleted ids must be absent; every
document loaded into a new index (base-N) must be there with its value when
the log records that load's end; and every other document must be named by
the log.

Exit status 0 only if everything holds; 1 if something does not; 2 on bad
input. --json prints a report with the counts and every failure.

Example:
  splitdemo verify --data /tmp/ix --acked /tmp/ix.acked --json
`

type verifyReport struct {
	Data      string               `json:"data"`
	OK        bool                 `json:"ok"`
	Check     recovery.CheckReport `json:"invariants"`
	Recovered []string             `json:"recovered_splits"` // and merges
	Splits    int                  `json:"splits"`           // committed splits the table records
	Merges    int                  `json:"merges"`           // committed merges the table records
	IDs       int                  `json:"ids_checked"`
	Lines     int                  `json:"acked_file_lines"`
	Failures  []string             `json:"failures"`
	// NeverCreated is set when the directory holds no routing table: a run
	// killed before it persisted its first table created no index, and
	// every acknowledged write is then missing.
	NeverCreated bool `json:"never_created,omitempty"`
}

func runVerify(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	data := fs.String("data", "", "")
	acked := fs.String("acked", "", "")
	asJSON := fs.Bool("json", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, verifyUsage)
			return exitOK
		}
		fmt.Fprintf(stderr, "splitdemo verify: %v\n", err)
		return exitUsage
	}
	if *data == "" {
		fmt.Fprintln(stderr, "splitdemo verify: --data is required")
		return exitUsage
	}
	if _, err := os.Stat(*data); err != nil {
		fmt.Fprintf(stderr, "splitdemo verify: --data %q: %v\n", *data, err)
		return exitUsage
	}
	if *acked != "" { // bad input, refused before recovery changes anything
		if fi, err := os.Stat(*acked); err != nil {
			fmt.Fprintf(stderr, "splitdemo verify: --acked %q: %v\n", *acked, err)
			return exitUsage
		} else if fi.IsDir() {
			fmt.Fprintf(stderr, "splitdemo verify: --acked %q: is a directory, want the write log of 'splitdemo run'\n", *acked)
			return exitUsage
		}
	}
	rep, err := verify(*data, *acked)
	if err != nil {
		fmt.Fprintf(stderr, "splitdemo verify: %v\n", err)
		return exitFail
	}
	switch {
	case *asJSON:
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintln(stdout, string(b))
	case rep.NeverCreated:
		fmt.Fprintf(stdout, "no index: no routing table was persisted (a run killed before it created the index), %d ids checked: ", rep.IDs)
		printVerdict(stdout, rep)
	default:
		fmt.Fprintf(stdout, "table v%d, %d shards (%d splits, %d merges), %d documents, %d ids checked, %d interrupted splits or merges recovered %q: ",
			rep.Check.TableVersion, rep.Check.Shards, rep.Splits, rep.Merges, rep.Check.Documents, rep.IDs, len(rep.Recovered), rep.Recovered)
		printVerdict(stdout, rep)
	}
	if !rep.OK {
		return exitFail
	}
	return exitOK
}

// printVerdict ends verify's summary line: ok, or the failures one a line.
func printVerdict(w io.Writer, rep verifyReport) {
	if rep.OK {
		fmt.Fprintln(w, "ok")
		return
	}
	fmt.Fprintf(w, "%d failures\n", len(rep.Failures))
	for _, f := range rep.Failures {
		fmt.Fprintln(w, "  "+f)
	}
}

func verify(dir, ackedPath string) (verifyReport, error) {
	rep := verifyReport{Data: dir}
	n, j, rr, err := recovery.Open(storage.Options{Dir: dir, Durability: storage.DurabilityRequest}, nil, zap.NewNop())
	if errors.Is(err, node.ErrNoTable) {
		rep.NeverCreated = true
		if ackedPath != "" {
			if err := checkAcked(ackedPath, map[string]model.Value{}, &rep); err != nil {
				return rep, err
			}
		}
		rep.OK = len(rep.Failures) == 0
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	defer n.Close()
	for _, d := range rr.Decisions {
		rep.Recovered = append(rep.Recovered, describeDecision(d))
	}
	for _, s := range n.Table().Splits() {
		if !s.InProgress {
			rep.Splits++
		}
	}
	for _, m := range n.Table().Merges() {
		if !m.InProgress {
			rep.Merges++
		}
	}
	docs := map[string]model.Value{}
	rep.Check = recovery.Check(n, j, func(_ routing.ShardID, d storage.Doc) { docs[d.ID] = model.Doc(d.Source) })
	rep.Failures = append(rep.Failures, rep.Check.Violations...)
	if ackedPath != "" {
		if err := checkAcked(ackedPath, docs, &rep); err != nil {
			return rep, err
		}
	}
	rep.OK = len(rep.Failures) == 0
	return rep, nil
}

// checkAcked replays the write log into a model and checks it against the
// documents found. Log order is real-time order: an attempt line is written
// before its write is sent, an ack line after it returned. A writer sends
// one write at a time, so a writer's new attempt while its previous one is
// unacknowledged means the run died with that one in flight (the log is
// appended to across runs): it is over, and may or may not have happened.
// Documents the run loaded before the load (ids "base-N") are checked when
// the log records the load's end (a "loaded" line): each must be there
// with its value. Without one (a run killed while loading) they are not
// checked. Any other document must be named by the log.
func checkAcked(path string, docs map[string]model.Value, rep *verifyReport) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--acked %q: %w", path, err)
	}
	defer f.Close()
	m := model.New(model.Options{})
	pending := map[int]*model.Write{} // per writer, its unacknowledged write
	loaded := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		rep.Lines++
		var l ackLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			// A process killed mid-line leaves a torn line (a rerun ends
			// it before appending to the log): skip it.
			continue
		}
		switch l.State {
		case "attempt":
			if w := pending[l.W]; w != nil {
				m.Fail(w)
			}
			v := model.DocDigest(l.ValueHash)
			if l.Op == "delete" {
				v = model.Absent
			}
			pending[l.W] = m.Attempt(l.ID, v)
		case "loaded":
			loaded = true
			for i := range l.Docs {
				id, src := baseDoc(i)
				m.Ack(m.Attempt(id, model.Doc(src)))
			}
		case "ack":
			w := pending[l.W]
			if w == nil {
				return fmt.Errorf("--acked %q: line %d acknowledges %s, which writer %d never attempted", path, rep.Lines, l.ID, l.W)
			}
			m.Ack(w)
			delete(pending, l.W)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("--acked %q: %w", path, err)
	}
	found := make(map[string]model.Value, len(docs))
	for id, v := range docs {
		if loaded || !strings.HasPrefix(id, "base-") {
			found[id] = v
		}
	}
	r, err := m.Check(m.Latest(), found)
	if err != nil {
		return err
	}
	rep.IDs = r.Checked
	for _, x := range r.Mismatches {
		if len(rep.Failures) < 100 {
			rep.Failures = append(rep.Failures, x.String())
		}
	}
	if n := r.Lost + r.Unexpected + r.Wrong - len(r.Mismatches); n > 0 && len(rep.Failures) < 100 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d more ids in a state the write log does not allow", n))
	}
	return nil
}
