package routing

// These tests replay the golden vectors transcribed from OpenSearch's own
// tests (testdata/*.json, each entry naming its source test). Every vector
// is checked; each test logs how many it checked so the count can be
// reported.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func loadVectors[T any](t *testing.T, name string) T {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read vectors: %v", err)
	}
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("decode %s: %v", name, err)
	}
	return v
}

// expectedError is the error shape of the vector files.
type expectedError struct {
	Type          string `json:"type"`
	Class         string `json:"class"`
	Message       string `json:"message"`
	MessagePrefix string `json:"message_prefix"`
	Match         string `json:"match"`
}

// check compares err with want: the exception class, then the message as
// the vector says to compare it (equals by default).
func (want *expectedError) check(err error) error {
	if err == nil {
		return fmt.Errorf("no error, want %s %q", want.class(), want.Message)
	}
	var e *Error
	if !errors.As(err, &e) {
		return fmt.Errorf("error %q carries no exception class, want %s", err, want.class())
	}
	if c := want.class(); c != "*" && e.Exception.String() != c {
		return fmt.Errorf("exception %s (%q), want %s", e.Exception, e.Message, c)
	}
	ok := true
	switch {
	case want.MessagePrefix != "":
		ok = strings.HasPrefix(e.Message, want.MessagePrefix)
	case want.Message == "":
	case want.Match == "contains":
		ok = strings.Contains(e.Message, want.Message)
	case want.Match == "startsWith":
		ok = strings.HasPrefix(e.Message, want.Message)
	default:
		ok = e.Message == want.Message
	}
	if !ok {
		return fmt.Errorf("message %q, want (%s) %q%s", e.Message, want.Match, want.Message, want.MessagePrefix)
	}
	return nil
}

func (want *expectedError) class() string {
	if want.Class != "" {
		return want.Class
	}
	return want.Type
}

func TestVectorsHash(t *testing.T) {
	v := loadVectors[struct {
		Vectors []struct {
			Input string `json:"input"`
			Want  int32  `json:"expected_int32"`
			Hex   string `json:"expected_hex"`
		} `json:"vectors"`
	}](t, "hash.json")
	nonBMP := 0
	for _, c := range v.Vectors {
		if got := Hash(c.Input); got != c.Want {
			t.Errorf("Hash(%q) = %d, want %d (%s)", c.Input, got, c.Want, c.Hex)
		}
		if utf16Len(c.Input) > len([]rune(c.Input)) {
			nonBMP++
		}
	}
	if nonBMP == 0 {
		t.Errorf("hash vectors hold no non-BMP text; want at least one surrogate pair")
	}
	t.Logf("hash.json: %d vectors checked (%d with non-BMP text)", len(v.Vectors), nonBMP)
}

type shardVector struct {
	ID            string  `json:"id"`
	Routing       *string `json:"routing"`
	Shards        int     `json:"number_of_shards"`
	RoutingShards int     `json:"number_of_routing_shards"`
	PartitionSize int     `json:"routing_partition_size"`
	Want          int     `json:"expected_shard"`
	Alternate     *struct {
		ID      string `json:"id"`
		Routing string `json:"routing"`
	} `json:"alternate_call"`
}

func (c shardVector) settings() Settings {
	return Settings{Shards: c.Shards, RoutingShards: c.RoutingShards, PartitionSize: max(1, c.PartitionSize)}
}

func checkShardVectors(t *testing.T, file string) {
	v := loadVectors[struct {
		Vectors []shardVector `json:"vectors"`
	}](t, file)
	checks := 0
	for _, c := range v.Vectors {
		s := c.settings()
		if err := s.Validate("test"); err != nil {
			t.Fatalf("%s: settings %+v invalid: %v", file, s, err)
		}
		tab, err := NewTable(ModePartition, s)
		if err != nil {
			t.Fatal(err)
		}
		routing := ""
		if c.Routing != nil {
			routing = *c.Routing
		}
		if _, got := tab.Route(c.ID, routing); int(got) != c.Want {
			t.Errorf("%s: Route(%q, %q) = %d, want %d", file, c.ID, routing, got, c.Want)
		}
		checks++
		if c.Alternate != nil {
			if _, got := tab.Route(c.Alternate.ID, c.Alternate.Routing); int(got) != c.Want {
				t.Errorf("%s: Route(%q, %q) = %d, want %d", file, c.Alternate.ID, c.Alternate.Routing, got, c.Want)
			}
			checks++
		}
	}
	t.Logf("%s: %d vectors, %d checks", file, len(v.Vectors), checks)
}

func TestVectorsShard(t *testing.T)       { checkShardVectors(t, "shard.json") }
func TestVectorsPartitioned(t *testing.T) { checkShardVectors(t, "partitioned.json") }

func TestVectorsRoutingShards(t *testing.T) {
	v := loadVectors[struct {
		Vectors []struct {
			Shards int `json:"number_of_shards"`
			Want   int `json:"expected_routing_num_shards"`
		} `json:"vectors"`
	}](t, "routing_shards.json")
	for _, c := range v.Vectors {
		if got := DefaultRoutingShards(c.Shards); got != c.Want {
			t.Errorf("DefaultRoutingShards(%d) = %d, want %d", c.Shards, got, c.Want)
		}
	}
	// The test's randomized properties, checked exhaustively: the result is
	// in (512, 1024] for n <= 512 and 2n above, and a multiple of n.
	for n := 1; n <= MaxShards; n++ {
		r := DefaultRoutingShards(n)
		if r%n != 0 || (n <= 512 && (r <= 512 || r > 1024)) || (n > 512 && r != 2*n) {
			t.Errorf("DefaultRoutingShards(%d) = %d breaks the calculateNumRoutingShards properties", n, r)
		}
	}
	t.Logf("routing_shards.json: %d vectors checked", len(v.Vectors))
}

func TestVectorsRoutingFactor(t *testing.T) {
	v := loadVectors[struct {
		Vectors []struct {
			Function      string         `json:"function"`
			Source        int            `json:"source_shards"`
			Target        int            `json:"target_shards"`
			Shards        int            `json:"number_of_shards"`
			RoutingShards int            `json:"number_of_routing_shards"`
			Factor        int            `json:"expected_factor"`
			Value         int            `json:"expected_value"`
			Err           *expectedError `json:"expected_error"`
		} `json:"vectors"`
	}](t, "routing_factor.json")
	for _, c := range v.Vectors {
		var err error
		switch c.Function {
		case "getRoutingFactor":
			var f int
			f, err = RoutingFactor(c.Source, c.Target)
			if c.Err == nil && f != c.Factor {
				t.Errorf("RoutingFactor(%d, %d) = %d, want %d", c.Source, c.Target, f, c.Factor)
			}
		case "number_of_routing_shards_setting":
			var s Settings
			s, err = NewSettings("test", c.Shards, c.RoutingShards, 1)
			if c.Err == nil && s.RoutingShards != c.Value {
				t.Errorf("NewSettings(%d, %d).RoutingShards = %d, want %d", c.Shards, c.RoutingShards, s.RoutingShards, c.Value)
			}
		default:
			t.Fatalf("unknown function %q", c.Function)
		}
		if c.Err != nil {
			if e := c.Err.check(err); e != nil {
				t.Errorf("%s(%d,%d / %d,%d): %v", c.Function, c.Source, c.Target, c.Shards, c.RoutingShards, e)
			}
		} else if err != nil {
			t.Errorf("%s(%d,%d / %d,%d): unexpected error %v", c.Function, c.Source, c.Target, c.Shards, c.RoutingShards, err)
		}
	}
	t.Logf("routing_factor.json: %d vectors checked", len(v.Vectors))
}

type selectVector struct {
	T             int            `json:"target_shard_id"`
	Source        int            `json:"source_number_of_shards"`
	RoutingShards int            `json:"source_routing_num_shards"`
	Target        int            `json:"target_number_of_shards"`
	WantShard     int            `json:"expected_source_shard"`
	WantShards    []ShardID      `json:"expected_source_shards"`
	Err           *expectedError `json:"expected_error"`
}

func (c selectVector) src() Settings {
	r := c.RoutingShards
	if r == 0 {
		r = c.Source
	}
	return Settings{Shards: c.Source, RoutingShards: r, PartitionSize: 1}
}

// checkSelectVectors replays every selection vector of file through sel
// and compares what it got with what it wants; the baseline package runs
// the same files through its own path.
func checkSelectVectors(t *testing.T, file string, sel func(selectVector) (any, any, error)) {
	v := loadVectors[struct {
		Vectors []selectVector `json:"vectors"`
	}](t, file)
	for _, c := range v.Vectors {
		got, want, err := sel(c)
		if c.Err != nil {
			if e := c.Err.check(err); e != nil {
				t.Errorf("%s %+v: %v", file, c, e)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %+v: unexpected error %v", file, c, err)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s %+v: got %v, want %v", file, c, got, want)
		}
	}
	t.Logf("%s: %d vectors checked", file, len(v.Vectors))
}

func TestVectorsSplitSelect(t *testing.T) {
	checkSelectVectors(t, "split_select.json", func(c selectVector) (any, any, error) {
		got, err := SelectSplitShard(c.T, c.src(), c.Target)
		return got, c.WantShard, err
	})
}

func TestVectorsShrinkSelect(t *testing.T) {
	checkSelectVectors(t, "shrink_select.json", func(c selectVector) (any, any, error) {
		got, err := SelectShrinkShards(c.T, c.src(), c.Target)
		return got, c.WantShards, err
	})
}

func TestVectorsCloneSelect(t *testing.T) {
	checkSelectVectors(t, "clone_select.json", func(c selectVector) (any, any, error) {
		got, err := SelectCloneShard(c.T, c.src(), c.Target)
		return got, c.T, err
	})
}

func TestVectorsShrinkTargetShards(t *testing.T) {
	v := loadVectors[struct {
		Vectors []struct {
			Max    *int64 `json:"max_shard_size_bytes"`
			Store  *int64 `json:"primaries_store_bytes"`
			Source int    `json:"source_number_of_shards"`
			Want   int    `json:"expected_target_shards"`
		} `json:"vectors"`
	}](t, "shrink_target_shards.json")
	for _, c := range v.Vectors {
		if got := TargetShardsForShrink(c.Max, c.Store, c.Source); got != c.Want {
			t.Errorf("TargetShardsForShrink(%v, %v, %d) = %d, want %d", ptrString(c.Max), ptrString(c.Store), c.Source, got, c.Want)
		}
	}
	t.Logf("shrink_target_shards.json: %d vectors checked", len(v.Vectors))
}

func ptrString(p *int64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// ResizeVector is one entry of resize_validation.json.
type ResizeVector struct {
	Op                string         `json:"operation"`
	Layer             string         `json:"layer"`
	SourceExists      *bool          `json:"source_exists"`
	TargetExists      bool           `json:"target_exists"`
	SourceName        string         `json:"source_name"`
	TargetName        string         `json:"target_name"`
	SourceShards      int            `json:"source_number_of_shards"`
	SourceRouting     int            `json:"source_routing_num_shards"`
	WriteBlocked      *bool          `json:"source_write_blocked"`
	DataStreamWrite   bool           `json:"source_is_data_stream_write_index"`
	TargetShards      *int           `json:"target_number_of_shards"`
	AllOnOneNode      bool           `json:"all_source_shards_started_on_one_node"`
	MaxShardSize      *int64         `json:"max_shard_size"`
	PerShardDocs      []int64        `json:"per_source_shard_docs"`
	SourceSoftDeletes *bool          `json:"source_soft_deletes"`
	TargetSettings    map[string]any `json:"target_settings"`
	ExpectOK          bool           `json:"expected_ok"`
	Err               *expectedError `json:"expected_error"`
	Note              string         `json:"note"`
}

// Request builds the ResizeRequest a vector describes. Fields the
// transport-layer vectors leave out take values that pass the checks they
// do not exercise (source exists and is write-blocked).
func (c ResizeVector) Request() ResizeRequest {
	op, _ := ParseResizeOp(c.Op)
	r := c.SourceRouting
	if r == 0 {
		r = c.SourceShards
	}
	req := ResizeRequest{
		Op: op, Source: c.SourceName, Target: c.TargetName,
		SourceExists: c.SourceExists == nil || *c.SourceExists, TargetExists: c.TargetExists,
		SourceSettings:     Settings{Shards: c.SourceShards, RoutingShards: r, PartitionSize: 1},
		SourceWriteBlocked: c.WriteBlocked == nil || *c.WriteBlocked,
		AllShardsOnOneNode: c.AllOnOneNode || c.Layer != "",
		MaxShardSize:       c.MaxShardSize, SourceShardDocs: c.PerShardDocs, SourceSoftDeletes: c.SourceSoftDeletes,
	}
	if req.Source == "" {
		req.Source, req.Target = "source", "target"
	}
	if c.DataStreamWrite {
		req.SourceDataStreamWrite = "data-stream"
	}
	if c.TargetShards != nil {
		req.TargetShards = *c.TargetShards
	}
	if v, ok := c.TargetSettings["index.number_of_routing_shards"].(float64); ok {
		req.TargetRoutingShards = int(v)
	}
	if v, ok := c.TargetSettings["index.soft_deletes.enabled"].(bool); ok {
		req.TargetSoftDeletes = &v
	}
	return req
}

// Check replays the vector against a resize implementation.
func (c ResizeVector) Check(err error) error {
	if c.Err != nil {
		return c.Err.check(err)
	}
	if err != nil {
		return fmt.Errorf("unexpected error %v", err)
	}
	return nil
}

func TestVectorsResizeValidation(t *testing.T) {
	v := loadVectors[struct {
		Vectors []ResizeVector `json:"vectors"`
	}](t, "resize_validation.json")
	for i, c := range v.Vectors {
		req := c.Request()
		var err error
		if c.Layer != "" {
			_, err = PrepareResize(req)
		} else {
			err = ValidateResize(req)
		}
		if e := c.Check(err); e != nil {
			t.Errorf("resize_validation.json[%d] %s %d->%v: %v", i, c.Op, c.SourceShards, ptrInt(c.TargetShards), e)
		}
	}
	t.Logf("resize_validation.json: %d vectors checked", len(v.Vectors))
}

func ptrInt(p *int) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

func TestVectorsARS(t *testing.T) {
	type stat struct {
		Node     string `json:"node"`
		Queue    int    `json:"queue_size"`
		Response int64  `json:"response_time_nanos"`
		Service  int64  `json:"service_time_nanos"`
	}
	v := loadVectors[struct {
		Nodes       []string         `json:"nodes"`
		Outstanding map[string]int64 `json:"initial_outstanding_requests"`
		Steps       []struct {
			Add   []stat `json:"add_stats"`
			First string `json:"expected_first"`
		} `json:"steps"`
	}](t, "ars.json")
	// derived.json holds the intermediate ranks of the same scenario,
	// computed from the formula in the reference note.
	d := loadVectors[struct {
		Vectors []json.RawMessage `json:"vectors"`
	}](t, "derived.json")
	var ranks struct {
		Steps []struct {
			Order []string `json:"order"`
			State map[string]struct {
				Outstanding int64   `json:"outstanding"`
				Queue       int     `json:"queue_int"`
				Rank        float64 `json:"rank"`
			} `json:"state_before_ranking"`
		} `json:"steps"`
	}
	for _, raw := range d.Vectors {
		if strings.Contains(string(raw), "ARS ranks") {
			if err := json.Unmarshal(raw, &ranks); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(ranks.Steps) != len(v.Steps) {
		t.Fatalf("derived ARS ranks have %d steps, scenario %d", len(ranks.Steps), len(v.Steps))
	}
	a := NewARS()
	for n, c := range v.Outstanding {
		a.SetOutstanding(n, c)
	}
	rankChecks := 0
	for i, step := range v.Steps {
		for _, s := range step.Add {
			a.AddNodeStatistics(s.Node, s.Queue, s.Response, s.Service)
		}
		for node, want := range ranks.Steps[i].State {
			got, ok := a.Rank(node)
			if !ok || abs(got-want.Rank) > 1e-5 || a.Outstanding(node) != want.Outstanding {
				t.Errorf("step %d: Rank(%s) = %f (outstanding %d), want %f (outstanding %d)",
					i+1, node, got, a.Outstanding(node), want.Rank, want.Outstanding)
			}
			rankChecks++
		}
		order := a.Select(v.Nodes, 0)
		if order[0] != step.First || !slices.Equal(order, ranks.Steps[i].Order) {
			t.Errorf("step %d: order %v, want first %s, order %v", i+1, order, step.First, ranks.Steps[i].Order)
		}
	}
	t.Logf("ars.json: %d steps checked, plus %d intermediate ranks", len(v.Steps), rankChecks)
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
