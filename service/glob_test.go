package service

import "testing"

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"a", "a", true}, {"a", "abc", false}, {"a*", "abc", true}, {"*c", "abc", true}, {"*b*", "abc", true},
		{"a*c", "abc", true}, {"a*c", "abcd", false}, {"*", "", true}, {"a*b*c", "aXbYc", true}, {"a*b*c", "aXcYb", false},
	} {
		if got := GlobMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("GlobMatch(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}
