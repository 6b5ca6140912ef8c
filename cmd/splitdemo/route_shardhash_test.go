package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/opensearch-project/opensearch-go/v4/opensearchutil/shardhash"

	"github.com/shardsplit/shardsplit/routing"
)

// TestRouteAgreesWithShardhash checks 'splitdemo route' against the
// official Go client's opensearchutil/shardhash, an independent
// implementation of OpenSearch's routing hash and shard formula (without
// routing_partition_size), on many ids: ASCII, accented, CJK, emoji
// (surrogate pairs), and with custom routing values.
func TestRouteAgreesWithShardhash(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 7))
	alphabets := []string{"abcdefghijklmnopqrstuvwxyz0123456789-_", "éèçàüößñ", "分片路由索引文档", "😀🚀🔥🌍", "a€𝄞z"}
	var ids []string
	for i := range 1500 {
		a := []rune(alphabets[i%len(alphabets)])
		n := 1 + rng.IntN(40)
		var b strings.Builder
		for range n {
			b.WriteRune(a[rng.IntN(len(a))])
		}
		ids = append(ids, b.String())
	}
	ids = append(ids, "user-42", "0", "doc-1")
	for _, tc := range []struct {
		shards, routingShards int
		routingValue          string
	}{
		{1, 0, ""}, {3, 0, ""}, {5, 0, ""}, {8, 0, ""}, {64, 0, ""}, {8, 4096, ""}, {6, 0, "tenant-7"}, {8, 0, "用户-é😀"},
	} {
		t.Run(fmt.Sprintf("shards=%d,R=%d,routing=%q", tc.shards, tc.routingShards, tc.routingValue), func(t *testing.T) {
			args := []string{"route", "--shards", strconv.Itoa(tc.shards)}
			r := tc.routingShards
			if r > 0 {
				args = append(args, "--routing-shards", strconv.Itoa(r))
			} else {
				r = routing.DefaultRoutingShards(tc.shards)
			}
			if tc.routingValue != "" {
				args = append(args, "--routing", tc.routingValue)
			}
			args = append(args, "--")
			out, errOut, code := runCmd(append(args, ids...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != len(ids) {
				t.Fatalf("%d lines for %d ids", len(lines), len(ids))
			}
			for i, line := range lines {
				var l routeLine
				if err := json.Unmarshal([]byte(line), &l); err != nil {
					t.Fatal(err)
				}
				eff := ids[i]
				if tc.routingValue != "" {
					eff = tc.routingValue
				}
				if want := shardhash.Hash(eff); l.Hash != want {
					t.Fatalf("id %q: hash %d, shardhash.Hash %d", ids[i], l.Hash, want)
				}
				if want := shardhash.ForRouting(eff, r, tc.shards); int(l.Root) != want || int(l.Shard) != want {
					t.Fatalf("id %q: root %d shard %d, shardhash.ForRouting %d", ids[i], l.Root, l.Shard, want)
				}
			}
		})
	}
}
