package findings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMeasured(t *testing.T) {
	for _, tc := range []struct {
		values           []float64
		median, min, max float64
	}{
		{[]float64{3}, 3, 3, 3},
		{[]float64{5, 1, 3}, 3, 1, 5},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
	} {
		n := Measured("x", "ms", tc.values...)
		got := [3]float64{n.Median, n.Min, n.Max}
		if diff := cmp.Diff([3]float64{tc.median, tc.min, tc.max}, got); diff != "" {
			t.Errorf("Measured(%v) (-want +got):\n%s", tc.values, diff)
		}
	}
}

func TestQuestionsAreNumberedInOrder(t *testing.T) {
	seen := map[string]bool{}
	for i, q := range Questions() {
		if q.ID != i+1 {
			t.Errorf("question %d has id %d", i+1, q.ID)
		}
		if q.Slug == "" || seen[q.Slug] || q.Title == "" || q.Question == "" || q.RaisedIn == "" || q.Run == nil {
			t.Errorf("question %d is incomplete or repeats slug %q", q.ID, q.Slug)
		}
		seen[q.Slug] = true
	}
	if n := len(Questions()); n != 13 {
		t.Errorf("%d questions, want 13", n)
	}
}

func TestRunWritesWhatRan(t *testing.T) {
	out := t.TempDir()
	boom := errors.New("boom")
	qs := []Question{
		{ID: 1, Slug: "a", Title: "A", Question: "a?", RaisedIn: "here", Run: func(ctx context.Context, cfg Config) (Answer, error) {
			return Answer{Answer: "yes", Numbers: []Number{Measured("t", "ms", 1, 2, 3)}}, nil
		}},
		{ID: 2, Slug: "b", Title: "B", Question: "b?", RaisedIn: "there", Run: func(ctx context.Context, cfg Config) (Answer, error) {
			return Answer{}, boom
		}},
	}
	r, err := Run(context.Background(), Config{Out: out, Quick: true}, qs)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{2}, r.Failed()); diff != "" {
		t.Errorf("failed (-want +got):\n%s", diff)
	}
	b, err := os.ReadFile(filepath.Join(out, "findings.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Answers) != 2 || back.Answers[0].Numbers[0].Median != 2 || back.Answers[1].Error != "boom" {
		t.Errorf("findings.json round trip: %+v", back.Answers)
	}
	md, err := os.ReadFile(filepath.Join(out, "findings.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## 1. A", "| t | 2 ms | 1–3 | 3 |", "## 2. B", "Not answered: boom"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("findings.md lacks %q:\n%s", want, md)
		}
	}
}

func TestRunStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ran := 0
	q := func(id int) Question {
		return Question{ID: id, Slug: string(rune('a' + id)), Title: "T", Question: "?", RaisedIn: "x", Run: func(ctx context.Context, cfg Config) (Answer, error) {
			ran++
			cancel()
			return Answer{}, nil
		}}
	}
	r, err := Run(ctx, Config{Out: t.TempDir()}, []Question{q(1), q(2), q(3)})
	if err != nil {
		t.Fatal(err)
	}
	if ran != 1 || !r.Interrupted || len(r.Answers) != 1 {
		t.Errorf("ran %d, interrupted %v, %d answers; want 1, true, 1", ran, r.Interrupted, len(r.Answers))
	}
}

// A question not built yet is reported as such, not as a failure; an
// answer with a table keeps its every-number table folded.
func TestRunNotBuiltAndTables(t *testing.T) {
	out := t.TempDir()
	qs := []Question{
		{ID: 1, Slug: "a", Title: "A", Question: "a?", RaisedIn: "here", Run: func(ctx context.Context, cfg Config) (Answer, error) {
			return Answer{Numbers: []Number{Measured("t", "ms", 1)}, Tables: []Table{{Header: []string{"h"}, Rows: [][]string{{"v"}}}}}, nil
		}},
		{ID: 2, Slug: "b", Title: "B", Question: "b?", RaisedIn: "there", Run: func(ctx context.Context, cfg Config) (Answer, error) {
			return Answer{}, ErrNotBuilt
		}},
	}
	r, err := Run(context.Background(), Config{Out: out}, qs)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Failed()) != 0 || !cmp.Equal(r.NotBuilt(), []int{2}) {
		t.Errorf("failed %v, not built %v; want none, [2]", r.Failed(), r.NotBuilt())
	}
	md, err := os.ReadFile(filepath.Join(out, "findings.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<details><summary>every number", "| h |", "| v |", "the experiment is not built yet"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("findings.md lacks %q:\n%s", want, md)
		}
	}
}

// A run of some questions keeps the earlier answers of the others, each
// marked with the run that measured it, and replaces its own.
func TestRunKeepsTheEarlierAnswersOfQuestionsItDidNotRun(t *testing.T) {
	out := t.TempDir()
	q := func(id int, answer string, err error) Question {
		return Question{ID: id, Slug: fmt.Sprint("q", id), Title: fmt.Sprint("T", id), Question: "?", RaisedIn: "x", Run: func(ctx context.Context, cfg Config) (Answer, error) {
			return Answer{Answer: answer, Numbers: []Number{Measured("t", "ms", 1)}}, err
		}}
	}
	first, err := Run(context.Background(), Config{Out: out, Command: "first"}, []Question{q(1, "one", nil), q(2, "two", nil), q(3, "", errors.New("boom"))})
	if err != nil {
		t.Fatal(err)
	}
	second, err := Run(context.Background(), Config{Out: out, Command: "second"}, []Question{q(2, "two again", nil)})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		ID     int
		Answer string
		From   string
	}
	var got []row
	for _, a := range second.Answers {
		r := row{ID: a.ID, Answer: a.Answer}
		if a.From != nil {
			r.From = a.From.Command
		}
		got = append(got, r)
	}
	// Question 3 failed in the first run: nothing to carry.
	want := []row{{1, "one", "first"}, {2, "two again", ""}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	if !second.Answers[0].From.Started.Equal(first.Started) {
		t.Errorf("carried answer's run started %v, want the first run's %v", second.Answers[0].From.Started, first.Started)
	}
	md, err := os.ReadFile(filepath.Join(out, "findings.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"This run answered question 2; question 1 carried over from earlier runs",
		"## 1. T1\n\n*Carried over from the run at", "`first`", "*Answer*: two again"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("findings.md lacks %q:\n%s", want, md)
		}
	}
	// Carried again, it still names the run that measured it.
	third, err := Run(context.Background(), Config{Out: out, Command: "third"}, []Question{q(3, "three", nil)})
	if err != nil {
		t.Fatal(err)
	}
	var froms []string
	for _, a := range third.Answers {
		from := ""
		if a.From != nil {
			from = a.From.Command
		}
		froms = append(froms, from)
	}
	if diff := cmp.Diff([]string{"first", "second", ""}, froms); diff != "" {
		t.Errorf("the runs the answers came from (-want +got):\n%s", diff)
	}
}

// A quick run neither carries a full run's answers nor is carried into
// one.
func TestRunCarriesNoAnswerAcrossQuickAndFull(t *testing.T) {
	out := t.TempDir()
	q := func(id int) Question {
		return Question{ID: id, Slug: fmt.Sprint("q", id), Title: "T", Question: "?", RaisedIn: "x", Run: func(ctx context.Context, cfg Config) (Answer, error) {
			return Answer{Answer: "a"}, nil
		}}
	}
	if _, err := Run(context.Background(), Config{Out: out}, []Question{q(1)}); err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), Config{Out: out, Quick: true}, []Question{q(2)})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Answers) != 1 || r.Answers[0].ID != 2 {
		t.Errorf("a quick run after a full one answers %+v, want question 2 alone", r.Answers)
	}
}

// Earlier answers that cannot be read stop the run before anything runs
// or is written, naming the file.
func TestRunRefusesEarlierAnswersItCannotRead(t *testing.T) {
	out := t.TempDir()
	file := filepath.Join(out, "findings.json")
	if err := os.WriteFile(file, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	ran := false
	_, err := Run(context.Background(), Config{Out: out}, []Question{{ID: 1, Slug: "a", Run: func(ctx context.Context, cfg Config) (Answer, error) {
		ran = true
		return Answer{}, nil
	}}})
	if err == nil || !strings.Contains(err.Error(), file) || ran {
		t.Errorf("Run over an unreadable findings.json: ran %v, error %v; want an error naming %s and nothing run", ran, err, file)
	}
	if b, _ := os.ReadFile(file); string(b) != "{not json" {
		t.Errorf("findings.json was overwritten: %q", b)
	}
}
