package clusterbench

import "testing"

// TestPercentileIsTheNearestRank: the p-th percentile is the smallest value
// with at least p% of the values at or below it, so the p99 of fewer than
// 100 runs is their maximum and the p50 of an even count the lower middle.
func TestPercentileIsTheNearestRank(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, tc := range []struct{ p, want float64 }{{50, 3}, {99, 5}, {100, 5}, {0, 1}, {20, 1}, {21, 2}} {
		if got := Percentile(xs, tc.p); got != tc.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", xs, tc.p, got, tc.want)
		}
	}
	if got := Percentile([]float64{1, 2, 3, 4}, 50); got != 2 {
		t.Errorf("p50 of 1..4 = %v, want 2", got)
	}
	if got := Percentile(nil, 99); got != 0 {
		t.Errorf("p99 of nothing = %v, want 0", got)
	}
}
