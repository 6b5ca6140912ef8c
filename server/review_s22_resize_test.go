package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// OpenSearch's ResizeRequest.validate refuses, as
// action_request_validation_exception (400), a _split without the target's
// index.number_of_shards and a max_shard_size that is not above 0. The
// first came back as a 500 "exception" with a message of ours ("routing: a
// split must give the target's number_of_shards"); the second was accepted
// and shrank the index to one shard.
func TestReviewS22ResizeRequestValidation(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/src", `{"settings":{"number_of_shards":4,"number_of_replicas":0}}`, nil)
	ts.do(t, "PUT", "/src/_doc/1", `{"a":"x"}`, nil)
	ts.do(t, "PUT", "/src/_settings", `{"index.blocks.write":true}`, nil)
	for _, tc := range []struct {
		name, path, body string
		reason           string
	}{
		{"split without number_of_shards", "/src/_split/t", "",
			"Validation Failed: 1: index.number_of_shards is required for split operations;"},
		{"split with a null number_of_shards", "/src/_split/t", `{"settings":{"index.number_of_shards":null}}`,
			"Validation Failed: 1: index.number_of_shards is required for split operations;"},
		{"shrink with max_shard_size 0", "/src/_shrink/t", `{"max_shard_size":"0b"}`,
			"Validation Failed: 1: max_shard_size must be greater than 0;"},
		{"both, with a read_only target", "/src/_split/t", `{"settings":{"index.blocks.read_only":true}}`,
			"Validation Failed: 1: index.number_of_shards is required for split operations;" +
				"2: target index [t] will be blocked by [index.blocks.read_only=true], this will disable metadata writes and cause the shards to be unassigned;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var eb errBody
			st := ts.do(t, "PUT", tc.path, tc.body, &eb)
			if st != 400 || eb.Error.Type != "action_request_validation_exception" || eb.Error.Reason != tc.reason {
				t.Fatalf("got %d %s %q, want 400 action_request_validation_exception %q", st, eb.Error.Type, eb.Error.Reason, tc.reason)
			}
		})
	}
	if st := ts.do(t, "HEAD", "/t", "", nil); st != 404 {
		t.Errorf("a refused resize left its target: HEAD /t = %d", st)
	}
}

// A resize's target index.number_of_shards above 1024 is refused as
// OpenSearch's TransportResizeAction reads it (Setting.parseInt, before any
// shard selection): 400 illegal_argument_exception naming the value. It
// came back as the selection's error instead: for a split a 500
// illegal_state_exception about routing shards.
func TestReviewS22ResizeTargetShardsAboveTheMaximum(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/src", `{"settings":{"number_of_shards":4,"number_of_replicas":0}}`, nil)
	ts.do(t, "PUT", "/src/_settings", `{"index.blocks.write":true}`, nil)
	const reason = "Failed to parse value [2048] for setting [index.number_of_shards] must be <= 1024"
	for _, op := range []string{"_split", "_shrink", "_clone"} {
		t.Run(op, func(t *testing.T) {
			var eb errBody
			st := ts.do(t, "PUT", "/src/"+op+"/t", `{"settings":{"index.number_of_shards":2048}}`, &eb)
			if st != 400 || eb.Error.Type != "illegal_argument_exception" || eb.Error.Reason != reason {
				t.Fatalf("got %d %s %q, want 400 illegal_argument_exception %q", st, eb.Error.Type, eb.Error.Reason, reason)
			}
		})
	}
}

// A source whose index.blocks.read_only the target would inherit is refused
// with TransportResizeAction's message, verbatim; the message was ours
// ("... inherited from [src]; set [index.blocks.read_only] to null in the
// request").
func TestReviewS22ResizeInheritedReadOnlyMessage(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/src", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil)
	ts.do(t, "PUT", "/src/_settings", `{"index.blocks.read_only":true}`, nil)
	const reason = "target index [t] will be blocked by [index.blocks.read_only=true] which is copied from the source index [src], " +
		"this will disable metadata writes and cause the shards to be unassigned"
	var eb errBody
	st := ts.do(t, "PUT", "/src/_clone/t", "", &eb)
	if st != 400 || eb.Error.Type != "illegal_argument_exception" || eb.Error.Reason != reason {
		t.Fatalf("got %d %s %q, want 400 illegal_argument_exception %q", st, eb.Error.Type, eb.Error.Reason, reason)
	}
}
