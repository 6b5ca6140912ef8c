package experiment

import (
	"testing"

	"github.com/shardsplit/shardsplit/internal/model"
	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// requireLoadServed fails a run whose writers were refused: the runs inject
// no fault, so every write must be acknowledged, and some of those in
// flight during the split window and after it. Verify alone cannot see it:
// a failed write may or may not have happened, so a model whose writes all
// failed allows anything the index holds, and the run's record count
// includes failed writes. With every write refused while a split was in
// progress (mutation: node.Write's guard returning an error whenever
// t.InProgress() is not empty) TestInPlaceRunVerifies passed in both modes
// (review s21).
func requireLoadServed(t *testing.T, out *Outcome) {
	t.Helper()
	recs := out.Load.Records
	all := loadgen.Summarize(recs, 0, out.End+1<<40)
	during := loadgen.SummarizeOverlap(recs, out.WindowStart, out.WindowEnd)
	after := loadgen.Summarize(recs, out.WindowEnd, out.End+1<<40)
	if all.Errors > 0 || during.Acked == 0 || after.Acked == 0 {
		t.Errorf("the load was not served: %d of %d writes failed (first: %v); %d acknowledged in flight during the window [%v, %v], %d after it",
			all.Errors, len(recs), out.Load.Errors, during.Acked, out.WindowStart, out.WindowEnd, after.Acked)
	}
}

// fakeIndex serves the dataset's documents as loaded, one of them with
// another source.
type fakeIndex struct {
	d       *Dataset
	changed string
}

func (f fakeIndex) Search(fn func(routing.ShardID, storage.Doc) error) error {
	t := f.d.Table
	return eachInitialDoc(f.d.Config, false, func(id, r string, src []byte) error {
		if id == f.changed {
			src = []byte("not the loaded source")
		}
		p, shard := t.Route(id, r)
		return fn(shard, storage.Doc{Root: t.Keyspace(p.Root), Key: t.KeyOf(p), ID: id, Routing: r, Source: src})
	})
}

// Verify loaded the dataset's documents as AnyDoc, "some document": a
// loaded document the load never wrote could come back with any contents
// (a merge rewrites the smaller sources' documents) and pass. It now loads
// each one's own source, drawn again from the load's seed (review s21).
func TestReviewS21VerifyChecksALoadedDocumentsSource(t *testing.T) {
	cfg := DatasetConfig{Mode: routing.ModePartition, Settings: routing.Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1},
		Docs: 500, Load: loadgen.Config{Writers: 4, IDsPerWriter: 100, DocSize: 64, Seed: 3}}
	tab, err := routing.NewTable(cfg.Mode, cfg.Settings)
	if err != nil {
		t.Fatal(err)
	}
	d := &Dataset{Config: cfg, Table: tab}
	fresh := func() *loadgen.Result { return &loadgen.Result{Model: model.New(model.Options{Compact: true})} }
	v, err := Verify(tab, fakeIndex{d: d}, d, fresh())
	if err != nil || !v.OK() || v.Checked != 500 {
		t.Fatalf("the index as loaded: %+v, %v", v, err)
	}
	v, err = Verify(tab, fakeIndex{d: d, changed: "w01-000007"}, d, fresh())
	if err != nil {
		t.Fatal(err)
	}
	if v.OK() || v.Lost != 1 {
		t.Errorf("a loaded document with another source: %+v, want it counted lost (stale or from nowhere)", v)
	}
}
