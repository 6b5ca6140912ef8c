package loadgen

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestMaxStall(t *testing.T) {
	tests := []struct {
		name   string
		recs   []Record
		want   time.Duration
		wantAt time.Duration
	}{
		{"none", nil, 0, 0},
		{"one write", []Record{{Start: ms(0), End: ms(5), OK: true, Moving: true}}, ms(5), 0},
		{"overlapping, acks keep coming", []Record{
			{Start: ms(0), End: ms(3), OK: true, Moving: true},
			{Start: ms(1), End: ms(6), OK: true, Moving: true},
			{Start: ms(2), End: ms(8), OK: true, Moving: true},
		}, ms(3), 0},
		{"a stall during a handoff", []Record{
			{Start: ms(0), End: ms(1), OK: true, Moving: true},
			{Start: ms(10), End: ms(30), OK: true, Moving: true},
			{Start: ms(12), End: ms(31), OK: true, Moving: true},
			{Start: ms(40), End: ms(41), OK: true, Moving: true},
		}, ms(20), ms(10)},
		{"writes not moving do not count", []Record{
			{Start: ms(0), End: ms(50), OK: true, Moving: false},
			{Start: ms(0), End: ms(2), OK: true, Moving: true},
		}, ms(2), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MaxStall(tt.recs, 0, ms(1000)); got != tt.want {
				t.Errorf("MaxStall = %v, want %v", got, tt.want)
			}
			if got, at := LongestStall(tt.recs, 0, ms(1000)); got != tt.want || at != tt.wantAt {
				t.Errorf("LongestStall = %v at %v, want %v at %v", got, at, tt.want, tt.wantAt)
			}
		})
	}
}

func TestQuietIntervals(t *testing.T) {
	recs := []Record{
		{Start: ms(0), End: ms(1), OK: true, Moving: true},
		{Start: ms(10), End: ms(30), OK: true, Moving: true},
		{Start: ms(12), End: ms(31), OK: true, Moving: true},
		{Start: ms(40), End: ms(43), OK: true, Moving: true},
		{Start: ms(40), End: ms(90), OK: true, Moving: false},
	}
	all := []Quiet{{0, ms(1)}, {ms(10), ms(20)}, {ms(30), ms(1)}, {ms(40), ms(3)}}
	if d := cmp.Diff(all, QuietIntervals(recs, 0, ms(1000), 0)); d != "" {
		t.Errorf("QuietIntervals, min 0 (-want +got):\n%s", d)
	}
	if d := cmp.Diff(all[1:2], QuietIntervals(recs, 0, ms(1000), ms(5))); d != "" {
		t.Errorf("QuietIntervals, min 5 ms (-want +got):\n%s", d)
	}
}

func TestSummarize(t *testing.T) {
	var recs []Record
	for i := range 100 {
		recs = append(recs, Record{Start: ms(i * 10), End: ms(i*10 + i%10 + 1), OK: true, Retries: i % 2})
	}
	recs = append(recs, Record{Start: ms(5), End: ms(6), OK: false})
	w := Summarize(recs, 0, ms(2000))
	if w.Acked != 100 || w.Errors != 1 || w.Retries != 50 || w.P50 != ms(6) || w.Max != ms(10) || w.OpsPerS != 50 {
		t.Errorf("Summarize = %+v", w)
	}
}

// A write that blocks and then fails was outstanding the whole time and
// acknowledged nothing: the stall it sat in is a stall. Counting
// acknowledged writes only, a writer blocked 500 ms that then got an error
// would show no stall at all, and a window whose every write failed after
// blocking would measure a stall of 0.
func TestAFailedWriteIsOutstandingUntilItEnds(t *testing.T) {
	tests := []struct {
		name   string
		recs   []Record
		want   time.Duration
		wantAt time.Duration
	}{
		{"blocked, then an error, then an ack", []Record{
			{Start: ms(0), End: ms(1), OK: true, Moving: true},
			{Start: ms(1), End: ms(500), OK: false, Moving: true},
			{Start: ms(500), End: ms(501), OK: true, Moving: true},
		}, ms(500), ms(1)},
		{"every write blocked, then failed", []Record{
			{Start: ms(10), End: ms(400), OK: false, Moving: true},
			{Start: ms(12), End: ms(410), OK: false, Moving: true},
		}, ms(400), ms(10)},
		{"a fast error does not end a stall", []Record{
			{Start: ms(0), End: ms(300), OK: true, Moving: true},
			{Start: ms(5), End: ms(6), OK: false, Moving: true},
		}, ms(300), 0},
		{"failed writes not moving do not count", []Record{
			{Start: ms(0), End: ms(2), OK: true, Moving: true},
			{Start: ms(2), End: ms(900), OK: false, Moving: false},
		}, ms(2), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, at := LongestStall(tt.recs, 0, ms(1000)); got != tt.want || at != tt.wantAt {
				t.Errorf("LongestStall = %v at %v, want %v at %v", got, at, tt.want, tt.wantAt)
			}
		})
	}
}
