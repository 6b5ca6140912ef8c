package loadgen

import (
	"testing"
	"time"
)

// A write that blocks and then fails was outstanding the whole time and
// acknowledged nothing: the stall it sat in is a stall. MaxStall counted
// acknowledged writes only, so a writer blocked 500 ms that then got an
// error showed no stall at all, and a window whose every write failed
// after blocking measured a stall of 0 (review s21).
func TestReviewS21AFailedWriteIsOutstandingUntilItEnds(t *testing.T) {
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
