package server_test

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22RESTSearchRoutingKeepsSpaces: a search's routing values are
// the parameter split at commas and nothing else
// (Strings.splitStringByCommaToArray is String.split(",")), so a value
// with a space is the value a write used. The values were trimmed: a
// document written with routing "v " was searched for on the shard of "v"
// and not found by the routed search that names its own routing.
func TestReviewS22RESTSearchRoutingKeepsSpaces(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":8}}`, nil); st != 200 {
		t.Fatal(st)
	}
	settings, _ := routing.NewSettings("logs", 8, 0, 1)
	v := ""
	for i := range 100 {
		if c := fmt.Sprint("v", i); settings.Place("x", c+" ").Root != settings.Place("x", c).Root {
			v = c + " "
			break
		}
	}
	if st := ts.do(t, "PUT", "/logs/_doc/1?routing="+url.QueryEscape(v), `{}`, nil); st != 201 {
		t.Fatal(st)
	}
	var c struct {
		Count int `json:"count"`
	}
	if st := ts.do(t, "GET", "/logs/_count?routing="+url.QueryEscape(v), "", &c); st != 200 || c.Count != 1 {
		t.Errorf("count with routing %q, the document's own: HTTP %d count %d, want 1", v, st, c.Count)
	}
}
