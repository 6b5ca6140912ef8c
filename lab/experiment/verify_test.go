package experiment

import (
	"testing"

	"github.com/shardsplit/shardsplit/internal/model"
	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

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

// Verify checks each of the dataset's loaded documents against its own
// source, drawn again from the load's seed, not as AnyDoc ("some
// document"): a loaded document the load never wrote could otherwise come
// back with any contents (a merge rewrites the smaller sources'
// documents) and pass.
func TestVerifyChecksALoadedDocumentsSource(t *testing.T) {
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
