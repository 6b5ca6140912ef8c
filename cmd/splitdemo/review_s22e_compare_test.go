package main

import (
	"io"
	"strings"
	"testing"
)

// TestReviewS22eCompareRefusesUnmeasurableLoads: compare accepted any
// --rate, --read-rate, --steady and --after that was not negative. A NaN
// or infinite rate paced nothing (loadgen reads an interval <= 0 as "as
// fast as possible") and then failed the whole run at its end, when
// summary.json could not encode the NaN; a rate so low that writers/rate
// seconds overflow a time.Duration was unpaced too; --rate 0 wrote flat out
// under a report saying "under 0 writes/s"; a zero or negative --steady
// left no steady window, so throughput during the split was reported as a
// percentage of 0 ops/s; a negative --after was read as 0. Each must be a
// usage error naming the flag and its value.
func TestReviewS22eCompareRefusesUnmeasurableLoads(t *testing.T) {
	for _, args := range [][]string{
		{"--rate", "NaN"}, {"--rate", "+Inf"}, {"--rate", "0"}, {"--rate", "1e-12"},
		{"--read-rate", "NaN"}, {"--read-rate", "+Inf"}, {"--read-rate", "1e-12"},
		{"--steady", "0s"}, {"--steady", "-1s"}, {"--after", "-1s"},
	} {
		cfg, code, err := parseCompare(args, io.Discard)
		if err == nil {
			t.Errorf("%v accepted: rate %v, read rate %v, steady %v, after %v", args, cfg.rate, cfg.readRate, cfg.steady, cfg.after)
			continue
		}
		if code != exitUsage || !strings.Contains(err.Error(), args[0]) || !strings.Contains(err.Error(), strings.TrimPrefix(args[1], "+")) {
			t.Errorf("%v: exit %d, error %q; want a usage error naming the flag and its value", args, code, err)
		}
	}
	for _, args := range [][]string{{"--rate", "0.5"}, {"--read-rate", "0"}, {"--after", "0s"}, {"--steady", "100ms"}} {
		if _, _, err := parseCompare(args, io.Discard); err != nil {
			t.Errorf("%v refused: %v", args, err)
		}
	}
}

// TestReviewS22eCompareRefusesFlagsNoStrategyUses: flags that shape only
// the in-place strategies (--split, --mode, --align-flush) were accepted
// with --strategy newindex and ignored, as --cleanup (new-index only) was
// without newindex: a run asked to split shard 3 four ways in opensearch
// mode measured a _split x2 of the whole index in partition mode, and its
// summary.json's config still said split_ways 4 and mode opensearch. Each
// must be a usage error naming the flag and the strategy.
func TestReviewS22eCompareRefusesFlagsNoStrategyUses(t *testing.T) {
	for _, args := range [][]string{
		{"--strategy", "newindex", "--split", "3:4"},
		{"--strategy", "newindex", "--mode", "opensearch"},
		{"--strategy", "newindex", "--align-flush", "1s"},
		{"--strategy", "inplace", "--cleanup", "range"},
		{"--strategy", "rfc", "--cleanup", "per-doc"},
	} {
		_, code, err := parseCompare(args, io.Discard)
		if err == nil {
			t.Errorf("%v accepted: the flag is ignored by every strategy run", args)
			continue
		}
		if code != exitUsage || !strings.Contains(err.Error(), args[2]) || !strings.Contains(err.Error(), args[1]) {
			t.Errorf("%v: exit %d, error %q; want a usage error naming %s and --strategy %s", args, code, err, args[2], args[1])
		}
	}
	for _, args := range [][]string{
		{"--strategy", "all", "--split", "3:4", "--cleanup", "range", "--mode", "opensearch"},
		{"--strategy", "both", "--align-flush", "1s", "--cleanup", "range"},
		{"--strategy", "rfc", "--split", "3"},
		{"--strategy", "newindex", "--cleanup", "range"},
	} {
		if _, _, err := parseCompare(args, io.Discard); err != nil {
			t.Errorf("%v refused: %v", args, err)
		}
	}
}
