package main

import (
	"io"
	"strings"
	"testing"
)

func TestParseByteSizeReadsBytesAndBinaryUnits(t *testing.T) {
	for in, want := range map[string]int64{"1048576": 1 << 20, "64MiB": 64 << 20, "1GiB": 1 << 30, "512KiB": 512 << 10, "2 GiB": 2 << 30} {
		if got, err := parseByteSize(in); err != nil || got != want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1GB", "-1MiB", "lots", "99999999999GiB"} {
		if got, err := parseByteSize(in); err == nil {
			t.Errorf("parseByteSize(%q) = %d, want an error", in, got)
		}
	}
}

// The split scenario's flags are checked before any process starts.
func TestClusterbenchRefusesAnUnknownStrategyOrASmallParent(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--only", "split", "--strategy", "recover,sideways"}, `unknown strategy "sideways"`},
		{[]string{"--only", "split", "--parent-size", "512KiB"}, "want a size of at least 1MiB"},
		{[]string{"--only", "splits"}, `unknown measurement "splits"`},
	} {
		var stderr strings.Builder
		if code := run(append([]string{"clusterbench", "--out", t.TempDir()}, tc.args...), io.Discard, &stderr); code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("clusterbench %v: exit %d, %q; want %d and %q", tc.args, code, stderr.String(), exitUsage, tc.want)
		}
	}
}
