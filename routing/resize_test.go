package routing

import (
	"errors"
	"testing"
)

// TestPrepareResizeChecksTheTargetsSettingsBeforeTheWriteBlock: in
// OpenSearch TransportResizeAction.prepareCreateIndexRequest refuses a
// target that sets index.number_of_routing_shards before the create-index
// task looks at the source's write block, so a user who got both wrong
// hears about the setting first.
func TestPrepareResizeChecksTheTargetsSettingsBeforeTheWriteBlock(t *testing.T) {
	req := ResizeRequest{
		Op: Split, Source: "source", Target: "target",
		SourceExists:        true,
		SourceSettings:      Settings{Shards: 2, RoutingShards: 8, PartitionSize: 1},
		SourceWriteBlocked:  false,
		TargetShards:        4,
		TargetRoutingShards: 8,
	}
	_, err := PrepareResize(req)
	var re *Error
	if !errors.As(err, &re) {
		t.Fatalf("PrepareResize = %v, want a routing error", err)
	}
	if re.Exception != IllegalArgument || re.Message != "cannot provide index.number_of_routing_shards on resize" {
		t.Fatalf("PrepareResize = %s %q, want IllegalArgumentException %q",
			re.Exception, re.Message, "cannot provide index.number_of_routing_shards on resize")
	}

	// A missing source is still the first answer: the transport layer
	// needs its metadata.
	req.SourceExists = false
	if _, err := PrepareResize(req); !errors.As(err, &re) || re.Exception != IndexNotFound {
		t.Fatalf("PrepareResize of a missing source = %v, want IndexNotFoundException", err)
	}
}
