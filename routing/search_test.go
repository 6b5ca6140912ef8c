package routing

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestSearchShardsPartitionCollapse replays derived.json's partition-collapse
// cases: routed searches on partitioned indices, with the default routing
// shards (offsets collapse into one or two shards) and with R = N.
func TestSearchShardsPartitionCollapse(t *testing.T) {
	d := loadVectors[struct {
		Vectors []json.RawMessage `json:"vectors"`
	}](t, "derived.json")
	n := 0
	for _, raw := range d.Vectors {
		var c struct {
			Name       string         `json:"name"`
			Shards     int            `json:"number_of_shards"`
			P          int            `json:"routing_partition_size"`
			DefaultR   int            `json:"default_routing_num_shards"`
			HistDef    map[string]int `json:"distinct_shards_per_routing_value_histogram_default"`
			HistEq     map[string]int `json:"distinct_shards_per_routing_value_histogram_when_routing_num_shards_equals_shards"`
			Tenant0Def []ShardID      `json:"example_tenant_0_search_shards_default"`
			Tenant0Eq  []ShardID      `json:"example_tenant_0_search_shards_explicit"`
		}
		if err := json.Unmarshal(raw, &c); err != nil || !strings.HasPrefix(c.Name, "partition collapse") {
			continue
		}
		n++
		for _, r := range []struct {
			routingShards int
			tenant0       []ShardID
			hist          map[string]int
		}{{c.DefaultR, c.Tenant0Def, c.HistDef}, {c.Shards, c.Tenant0Eq, c.HistEq}} {
			s, err := NewSettings("i", c.Shards, r.routingShards, c.P)
			if r.routingShards == c.DefaultR && s.RoutingShards != c.DefaultR {
				t.Errorf("%s: default routing shards %d, want %d", c.Name, s.RoutingShards, c.DefaultR)
			}
			if err != nil {
				// R = N with P >= N is refused at creation; OpenSearch's
				// numbers come from a builder that skips that check.
				s = Settings{Shards: c.Shards, RoutingShards: r.routingShards, PartitionSize: c.P}
			}
			tab, _ := NewTable(ModePartition, s)
			if tab == nil {
				tab = &Table{version: 1, mode: ModePartition, settings: s, roots: unsplitRoots(s)}
			}
			if got := tab.SearchShards("tenant-0"); !slices.Equal(got, r.tenant0) {
				t.Errorf("%s R=%d: SearchShards(tenant-0) = %v, want %v", c.Name, r.routingShards, got, r.tenant0)
			}
			hist := map[string]int{}
			for i := range 10000 {
				hist[fmt.Sprint(len(tab.SearchShards(fmt.Sprintf("tenant-%d", i))))]++
			}
			if fmt.Sprint(hist) != fmt.Sprint(r.hist) {
				t.Errorf("%s R=%d: histogram %v, want %v", c.Name, r.routingShards, hist, r.hist)
			}
		}
	}
	if n != 2 {
		t.Fatalf("found %d partition-collapse cases, want 2", n)
	}
}

func unsplitRoots(s Settings) [][]Leaf {
	roots := make([][]Leaf, s.Shards)
	f := uint64(s.Factor())
	for r := range roots {
		roots[r] = []Leaf{{Shard: ShardID(r), Span: Span{uint64(r) * f, uint64(r+1) * f}}}
	}
	return roots
}

func TestSearchShardsSplitTable(t *testing.T) {
	tab, _ := NewTable(ModePartition, Settings{Shards: 4, RoutingShards: 64, PartitionSize: 1})
	tab, _ = Apply(tab, Edit{Kind: BeginSplit, Shard: 1, Ways: 2})
	if got := tab.SearchShards(""); !slices.Equal(got, []ShardID{0, 1, 2, 3}) {
		t.Errorf("unrouted during split = %v, want the active shards only", got)
	}
	sp, _ := tab.Split(1)
	tab, _ = Apply(tab, Edit{Kind: CommitSplit, Shard: 1, Children: childIDs(sp)})
	if got := tab.SearchShards(" , "); !slices.Equal(got, []ShardID{0, 2, 3, 4, 5}) {
		t.Errorf("unrouted after split = %v, want [0 2 3 4 5]", got)
	}
	// A routed search targets exactly the shard a document with that routing
	// lands on.
	for _, r := range []string{"a", "b", "tenant-9", "a,b"} {
		var want []ShardID
		for _, v := range strings.Split(r, ",") {
			_, sh := tab.Route("some-id", v)
			want = append(want, sh)
		}
		slices.Sort(want)
		want = slices.Compact(want)
		if got := tab.SearchShards(r); !slices.Equal(got, want) {
			t.Errorf("SearchShards(%q) = %v, want %v", r, got, want)
		}
	}
}

func TestParsePreference(t *testing.T) {
	tests := []struct {
		in     string
		typ    PreferenceType
		shards []ShardID
		err    bool
	}{
		{"", PreferNone, nil, false},
		{"_shards:0,3", PreferShards, []ShardID{0, 3}, false},
		{"_shards:2|_local", PreferShards, []ShardID{2}, false},
		{"_primaryFirst", PreferPrimaryFirst, nil, false},
		{"_only_nodes:n1,n2", PreferOnlyNodes, nil, false},
		{"session-42", PreferCustom, nil, false},
		{"_bogus", 0, nil, true},
		{"_shards:x", 0, nil, true},
	}
	for _, tt := range tests {
		p, err := ParsePreference(tt.in)
		if (err != nil) != tt.err || p.Type != tt.typ || !slices.Equal(p.Shards, tt.shards) {
			t.Errorf("ParsePreference(%q) = %+v, %v; want type %d shards %v err %v", tt.in, p, err, tt.typ, tt.shards, tt.err)
		}
	}
	if _, err := ParsePreference("_bogus:1"); err == nil || err.Error() != "no Preference for [_bogus]" {
		t.Errorf("ParsePreference(_bogus:1) = %v, want OpenSearch's message", err)
	}
}
