package findings

import (
	"fmt"
	"strings"
	"time"
)

// Markdown renders the whole report, the document committed as
// design/findings.md: a header naming the commit, the command and the
// machine; what the three strategies are and how to read the numbers; a
// Summary table with one row per question (its Summary, or why it has
// none); a Goals table gathering every question's goals; then one section
// per answer. data is what goes before a chart's or findings.json's file
// name for the link to resolve from where the report is written ("" when
// the report sits beside them).
func (r *Report) Markdown(data string) string {
	var b strings.Builder
	b.WriteString("# In-place shard split: findings for the RFC\n\n")
	b.WriteString(r.header())
	if r.Quick {
		b.WriteString("\n**Quick run: smaller data and fewer runs, a smoke test — not numbers to quote.**\n")
	}
	if r.Interrupted {
		b.WriteString("\n**Interrupted: only the questions answered below ran.**\n")
	}
	if carried := r.carried(); len(carried) > 0 {
		fmt.Fprintf(&b, "\nThis run answered %s; %s carried over from earlier runs, each named under its title.\n",
			questionList(r.ran()), questionList(carried))
	}
	b.WriteString("\n" + intro)
	b.WriteString("\n## How to read the numbers\n\n")
	fmt.Fprintf(&b, method, r.Runs, data+"findings.json")
	b.WriteString("\n")
	for _, k := range summaryKeys {
		fmt.Fprintf(&b, "- `%s`: %s\n", k.key, k.def)
	}
	b.WriteString("\n## Summary\n\n")
	b.WriteString(r.summaryTable())
	b.WriteString("\n## Goals\n\n")
	b.WriteString(r.goalsTable())
	for _, a := range r.Answers {
		fmt.Fprintf(&b, "\n## %d. %s\n\n", a.ID, a.Title)
		if a.From != nil {
			b.WriteString(a.From.line())
		}
		fmt.Fprintf(&b, "*Question* (%s): %s\n\n", a.RaisedIn, a.Question)
		switch {
		case a.NotBuilt:
			b.WriteString("**Not answered: the experiment is not built yet.**\n\n")
		case a.Error != "":
			fmt.Fprintf(&b, "**Not answered: %s**\n\n", a.Error)
		}
		if a.Answer != "" {
			fmt.Fprintf(&b, "*Answer*: %s\n\n", a.Answer)
		}
		if len(a.Numbers) > 0 {
			if len(a.Tables) > 0 { // the tables summarise; every number stays one click away
				b.WriteString("<details><summary>every number (medians, ranges)</summary>\n\n")
			}
			b.WriteString("| measure | median | range | runs |\n|---|---:|---:|---:|\n")
			for _, n := range a.Numbers {
				fmt.Fprintf(&b, "| %s | %s %s | %s–%s | %d |\n", n.Name, num(n.Median), n.Unit, num(n.Min), num(n.Max), len(n.Values))
			}
			b.WriteString("\n")
			if len(a.Tables) > 0 {
				b.WriteString("</details>\n\n")
			}
		}
		for _, t := range a.Tables {
			b.WriteString("| " + strings.Join(t.Header, " | ") + " |\n|")
			for range t.Header {
				b.WriteString("---|")
			}
			b.WriteString("\n")
			for _, row := range t.Rows {
				b.WriteString("| " + strings.Join(row, " | ") + " |\n")
			}
			b.WriteString("\n")
		}
		for _, g := range a.Goals {
			verdict := "met"
			if !g.Met {
				verdict = "**not met**"
				if g.Why != "" {
					verdict += ": " + g.Why
				}
			}
			fmt.Fprintf(&b, "- Goal: %s — measured %s — %s\n", g.Goal, g.Measured, verdict)
		}
		if len(a.Goals) > 0 {
			b.WriteString("\n")
		}
		for _, c := range a.Charts {
			fmt.Fprintf(&b, "![%s](%s)\n\n", c, data+c)
		}
		if a.Command != "" {
			fmt.Fprintf(&b, "Reproduce: `%s`\n\n", a.Command)
		}
		if a.NotMeasured != "" {
			fmt.Fprintf(&b, "Not measured: %s\n", a.NotMeasured)
		}
	}
	return b.String()
}

// num prints a number with sensible precision.
func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10 || v <= -10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// header is the line under the title: what was run, where and when.
func (r *Report) header() string {
	commit := "commit " + r.Commit
	if r.Commit == "" || r.Commit == unknownCommit {
		commit = "an " + unknownCommit
	}
	return fmt.Sprintf("*shardsplit at %s, %s UTC: `%s`, %s wall time, on %s; load average %v at the start, %v at the end; %d run(s) per timing, seed %d.*\n",
		commit, r.Started.UTC().Format("2006-01-02 15:04"), r.Command, wallTime(r.Seconds), machineLine(r.Machine),
		orUnknown(r.Machine["load_avg_start"]), orUnknown(r.Machine["load_avg_end"]), r.Runs, r.Seed)
}

// line says under a carried-over answer's title which run measured it.
func (o *Origin) line() string {
	commit := "commit " + o.Commit
	if o.Commit == "" || o.Commit == unknownCommit {
		commit = "an " + unknownCommit
	}
	return fmt.Sprintf("*Carried over from the run at %s, %s UTC: `%s`; load average %v at its start, %v at its end; %d run(s) per timing, seed %d.*\n\n",
		commit, o.Started.UTC().Format("2006-01-02 15:04"), o.Command, orUnknown(o.LoadStart), orUnknown(o.LoadEnd), o.Runs, o.Seed)
}

// ran and carried are the questions r's own run answered and those it
// carried over from earlier runs.
func (r *Report) ran() []int     { return r.ids(func(a Answer) bool { return a.From == nil }) }
func (r *Report) carried() []int { return r.ids(func(a Answer) bool { return a.From != nil }) }

func (r *Report) ids(keep func(Answer) bool) []int {
	var ids []int
	for _, a := range r.Answers {
		if keep(a) {
			ids = append(ids, a.ID)
		}
	}
	return ids
}

// questionList is "question 3" or "questions 1, 2 and 5" ("no question"
// for none).
func questionList(ids []int) string {
	var s []string
	for _, id := range ids {
		s = append(s, fmt.Sprint(id))
	}
	switch len(s) {
	case 0:
		return "no question"
	case 1:
		return "question " + s[0]
	}
	return "questions " + strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

func orUnknown(v any) any {
	if v == nil {
		return "unknown"
	}
	return v
}

// wallTime prints seconds as "1 h 2 min 3 s", "2 min 3 s" or "3 s".
func wallTime(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second)).Round(time.Second)
	h, m, s := int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60
	switch {
	case h > 0:
		return fmt.Sprintf("%d h %d min %d s", h, m, s)
	case m > 0:
		return fmt.Sprintf("%d min %d s", m, s)
	}
	return fmt.Sprintf("%d s", s)
}

// summaryTable has one row per question of Questions, answered in this
// run or not.
func (r *Report) summaryTable() string {
	var b strings.Builder
	b.WriteString("| # | question | answer |\n|---|---|---|\n")
	by := map[int]Answer{}
	for _, a := range r.Answers {
		by[a.ID] = a
	}
	for _, q := range Questions() {
		a, ran := by[q.ID]
		fmt.Fprintf(&b, "| %d | %s | %s |\n", q.ID, cell(q.Title), cell(summaryOf(a, ran)))
	}
	return b.String()
}

// summaryOf is a question's Summary row: its Summary, or briefly why it
// has none.
func summaryOf(a Answer, ran bool) string {
	switch {
	case !ran:
		return "Not run in this invocation."
	case a.NotBuilt:
		return "Not answered: the experiment is not built yet."
	case a.Error != "":
		return fmt.Sprintf("Not answered: the experiment failed (section %d says why).", a.ID)
	case a.Summary == "":
		return fmt.Sprintf("No summary: see section %d.", a.ID)
	}
	return a.Summary
}

// goalsTable gathers every answered question's goals.
func (r *Report) goalsTable() string {
	var b strings.Builder
	n := 0
	for _, a := range r.Answers {
		for _, g := range a.Goals {
			if n == 0 {
				b.WriteString("| # | goal | measured | met? |\n|---|---|---|---|\n")
			}
			n++
			verdict := "yes"
			if !g.Met {
				verdict = "**no**"
				if g.Why != "" {
					verdict += ": " + g.Why
				}
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s |\n", a.ID, cell(g.Goal), cell(g.Measured), cell(verdict))
		}
	}
	if n == 0 {
		return "No question run here measures a goal.\n"
	}
	return b.String()
}

// cell makes text safe inside a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ")
}
