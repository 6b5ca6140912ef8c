package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestRouteUser42(t *testing.T) {
	out, errOut, code := runCmd("route", "--shards", "8", "user-42")
	want := `{"id":"user-42","routing":null,"hash":-1591625367,"partition":361,"root":2,"shard":2,"table_version":1}` + "\n"
	if code != exitOK || out != want {
		t.Fatalf("route --shards 8 user-42 = %q (exit %d, stderr %q), want %q", out, code, errOut, want)
	}
}

// TestRouteOpenSearchE2E replays the derived end-to-end case of the split
// metadata notes (E2E-01): 8 shards, R 1024; root 2 split into 3, then the
// middle child split into 2, both committed.
func TestRouteOpenSearchE2E(t *testing.T) {
	out, errOut, code := runCmd("route", "--shards", "8", "--mode", "opensearch", "--split", "2:3", "--split", "9:2",
		"user-42", "doc-1", "doc-2", "doc-3", "doc-4", "doc-5", "doc-8", "doc-43", "doc-62", "doc-18")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := map[string]uint32{"user-42": 8, "doc-1": 3, "doc-2": 5, "doc-3": 4, "doc-4": 5, "doc-5": 7,
		"doc-8": 8, "doc-43": 11, "doc-62": 12, "doc-18": 10}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d", len(lines), len(want))
	}
	for _, line := range lines {
		var l routeLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		if l.Shard != want[l.ID] || l.TableVersion != 5 {
			t.Errorf("%s: shard %d (v%d), want %d (v5)", l.ID, l.Shard, l.TableVersion, want[l.ID])
		}
	}
}

func TestRoutePartitionModeSplit(t *testing.T) {
	// Partition 361 of root 2 (partitions 256..383): a 2-way split gives
	// [256,320) to shard 8 and [320,384) to shard 9; split points put the
	// cut where asked.
	tests := []struct {
		name  string
		args  []string
		shard uint32
	}{
		{"equal halves", []string{"--split", "2:2"}, 9},
		{"explicit point above", []string{"--split", "2@362"}, 8},
		{"explicit point at", []string{"--split", "2@361"}, 9},
		{"nested", []string{"--split", "2:2", "--split", "9:4"}, 12}, // 9 owns [320,384): 12 gets [352,368)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"route", "--shards", "8"}, tt.args...), "user-42")
			out, errOut, code := runCmd(args...)
			var l routeLine
			if code != exitOK || json.Unmarshal([]byte(out), &l) != nil || l.Shard != tt.shard {
				t.Fatalf("route %v = %q (exit %d, %s), want shard %d", tt.args, out, code, errOut, tt.shard)
			}
		})
	}
}

// TestRouteMerge: --merge applies after the --splits before it, in
// command-line order. Root 2 owns partitions [256,384); user-42 is
// partition 361. --split 2:4 gives 8[256,288) 9[288,320) 10[320,352)
// 11[352,384).
func TestRouteMerge(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		shard   uint32
		version uint64
	}{
		{"merge elsewhere", []string{"--split", "2:4", "--merge", "8+9"}, 11, 5},
		{"merge owner", []string{"--split", "2:4", "--merge", "11+10"}, 12, 5},
		{"three-way", []string{"--split", "2:4", "--merge", "9+10+11"}, 12, 5},
		{"merge back to one leaf", []string{"--split", "2:2", "--merge", "8+9"}, 10, 5},
		{"split after merge", []string{"--split", "2:2", "--merge", "8+9", "--split", "10:2"}, 12, 7},
		{"merge of merge", []string{"--split", "2:4", "--merge", "8+9", "--merge", "12+10", "--merge", "13+11"}, 14, 9},
		{"opensearch", []string{"--mode", "opensearch", "--split", "2:2", "--merge", "8+9", "--split", "10:2"}, 11, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"route", "--shards", "8"}, tt.args...), "user-42")
			out, errOut, code := runCmd(args...)
			var l routeLine
			if code != exitOK || json.Unmarshal([]byte(out), &l) != nil || l.Shard != tt.shard || l.TableVersion != tt.version {
				t.Fatalf("route %v = %q (exit %d, %s), want shard %d v%d", tt.args, out, code, errOut, tt.shard, tt.version)
			}
		})
	}
}

func TestRouteRoutingAndDashIDs(t *testing.T) {
	out, _, code := runCmd("route", "--shards", "8", "--routing", "tenant-1", "--", "-a", "b")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 2 {
		t.Fatalf("exit %d, output %q", code, out)
	}
	var a, b routeLine
	_ = json.Unmarshal([]byte(lines[0]), &a)
	_ = json.Unmarshal([]byte(lines[1]), &b)
	if a.ID != "-a" || a.Routing == nil || *a.Routing != "tenant-1" || a.Shard != b.Shard || a.Hash != b.Hash {
		t.Errorf("routed ids: %+v %+v, want both on tenant-1's shard", a, b)
	}
}

func TestRouteBadInput(t *testing.T) {
	tests := []struct {
		name string
		args []string
		bad  string // the bad value the message must name
	}{
		{"zero shards", []string{"--shards", "0", "x"}, "0"},
		{"bad split", []string{"--shards", "8", "--split", "2:x", "x"}, "2:x"},
		{"unknown shard", []string{"--shards", "8", "--split", "42:2", "x"}, "42:2"},
		{"bad mode", []string{"--mode", "hash", "x"}, "hash"},
		{"routing shards not a multiple", []string{"--shards", "8", "--routing-shards", "12", "x"}, "12"},
		{"empty id", []string{"--shards", "8", ""}, `""`},
		{"no ids", []string{"--shards", "8"}, "no ids"},
		{"unknown flag", []string{"--shard", "8", "x"}, "shard"},
		{"too deep", []string{"--shards", "8", "--split", "2@300,300", "x"}, "300"},
		{"merge one shard", []string{"--shards", "8", "--split", "2:2", "--merge", "8", "x"}, "[8]"},
		{"merge not adjacent", []string{"--shards", "8", "--split", "2:4", "--merge", "8+10", "x"}, "[8, 10]"},
		{"merge across roots", []string{"--shards", "8", "--merge", "1+2", "x"}, "[1, 2]"},
		{"merge unknown", []string{"--shards", "8", "--split", "2:2", "--merge", "8+42", "x"}, "[42]"},
		{"merge merged", []string{"--shards", "8", "--split", "2:2", "--merge", "8+9", "--merge", "8+9", "x"}, "[8]"},
		{"merge before split", []string{"--shards", "8", "--merge", "8+9", "--split", "2:2", "x"}, "8+9"},
		{"merge bad id", []string{"--shards", "8", "--merge", "8+x", "x"}, `"x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runCmd(append([]string{"route"}, tt.args...)...)
			if code != exitUsage || out != "" {
				t.Fatalf("route %v: exit %d, stdout %q; want exit 2 and no output", tt.args, code, out)
			}
			if strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tt.bad) {
				t.Errorf("route %v: stderr %q, want one line naming %s", tt.args, errOut, tt.bad)
			}
		})
	}
}

// route's flags come before the ids ("--" ends them, so that ids may start
// with "-"). An id that looks like a flag, not after "--", is a usage error
// naming it: taken for ids, "route user-42 --shards 8" would print user-42
// on a 1-shard index and lines for ids "--shards" and "8", exit 0.
func TestRouteRefusesAFlagAfterTheIDs(t *testing.T) {
	out, errOut, code := runCmd("route", "user-42", "--shards", "8")
	if code != exitUsage || out != "" || !strings.Contains(errOut, `"--shards"`) {
		t.Fatalf("route user-42 --shards 8: exit %d, stdout %q, stderr %q; want exit %d naming \"--shards\"", code, out, errOut, exitUsage)
	}
	for _, args := range [][]string{
		{"route", "--shards", "8", "--", "-leading-dash-id", "--also"},
		{"route", "--", "user-42"},
	} {
		if _, errOut, code := runCmd(args...); code != exitOK {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
}
