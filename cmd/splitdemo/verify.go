package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/loadgen"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

const verifyUsage = `splitdemo verify: recover a data directory and check it.

Usage:
  splitdemo verify --data DIR [--acked FILE] [--json]

Recovers DIR (finishing or rolling back any split a crash interrupted), then
checks: the routing table is valid with no split in progress; the split
journal agrees with it; every shard store holds only keys of its span; no
document is in two live shards and every document is on the shard the table
names. With --acked (the write log of 'splitdemo run'), every id in it must
be in the state of its last acknowledged write, or of the one write
attempted after it (in flight at the crash); deleted ids must be absent.

Exit status 0 only if everything holds; 1 if something does not; 2 on bad
input. --json prints a report with the counts and every failure.

Example:
  splitdemo verify --data /tmp/ix --acked /tmp/ix.acked --json
`

type verifyReport struct {
	Data      string               `json:"data"`
	OK        bool                 `json:"ok"`
	Check     recovery.CheckReport `json:"invariants"`
	Recovered []string             `json:"recovered_splits"`
	IDs       int                  `json:"ids_checked"`
	Lines     int                  `json:"acked_file_lines"`
	Failures  []string             `json:"failures"`
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
	rep, err := verify(*data, *acked)
	if err != nil {
		fmt.Fprintf(stderr, "splitdemo verify: %v\n", err)
		return exitFail
	}
	if *asJSON {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintf(stdout, "table v%d, %d shards, %d documents, %d ids checked, %d interrupted splits recovered %q: ",
			rep.Check.TableVersion, rep.Check.Shards, rep.Check.Documents, rep.IDs, len(rep.Recovered), rep.Recovered)
		if rep.OK {
			fmt.Fprintln(stdout, "ok")
		} else {
			fmt.Fprintf(stdout, "%d failures\n", len(rep.Failures))
			for _, f := range rep.Failures {
				fmt.Fprintln(stdout, "  "+f)
			}
		}
	}
	if !rep.OK {
		return exitFail
	}
	return exitOK
}

func verify(dir, ackedPath string) (verifyReport, error) {
	rep := verifyReport{Data: dir}
	n, j, rr, err := recovery.Open(storage.Options{Dir: dir, Durability: storage.DurabilityRequest}, nil, zap.NewNop())
	if err != nil {
		return rep, err
	}
	defer n.Close()
	for _, d := range rr.Decisions {
		rep.Recovered = append(rep.Recovered, fmt.Sprintf("split %d of shard %d: %s", d.Split, d.Parent, d.Action))
	}
	docs := map[string]uint64{}
	rep.Check = recovery.Check(n, j, func(_ routing.ShardID, d storage.Doc) { docs[d.ID] = loadgen.HashSource(d.Source) })
	rep.Failures = append(rep.Failures, rep.Check.Violations...)
	if ackedPath != "" {
		if err := checkAcked(ackedPath, docs, &rep); err != nil {
			return rep, err
		}
	}
	rep.OK = len(rep.Failures) == 0
	return rep, nil
}

// idHistory is what the write log says of one id.
type idHistory struct {
	lastAck *ackLine // the last acknowledged write
	// afterLast are the writes attempted after it and never acknowledged:
	// one per crash at most (a writer sends one write at a time, and a run
	// killed with a write in flight leaves it unacknowledged).
	afterLast []*ackLine
}

// checkAcked checks every id of the write log against the documents found.
func checkAcked(path string, docs map[string]uint64, rep *verifyReport) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--acked %q: %w", path, err)
	}
	defer f.Close()
	hist := map[string]*idHistory{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		rep.Lines++
		var l ackLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			// A process killed mid-line leaves a torn last line: skip it.
			continue
		}
		h := hist[l.ID]
		if h == nil {
			h = &idHistory{}
			hist[l.ID] = h
		}
		switch l.State {
		case "attempt":
			h.afterLast = append(h.afterLast, &l)
		case "ack":
			h.lastAck, h.afterLast = &l, nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("--acked %q: %w", path, err)
	}
	for id, h := range hist {
		rep.IDs++
		hash, found := docs[id]
		matches := func(l *ackLine) bool {
			if l == nil {
				return !found
			}
			if l.Op == "delete" {
				return !found
			}
			return found && hash == l.ValueHash
		}
		ok := matches(h.lastAck)
		for _, l := range h.afterLast {
			ok = ok || matches(l)
		}
		if ok {
			continue
		}
		if len(rep.Failures) < 100 {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s: found=%v hash=%x, last acknowledged %+v, attempted after it %+v", id, found, hash, h.lastAck, h.afterLast))
		}
	}
	return nil
}
