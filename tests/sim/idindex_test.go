package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/shardsplit/shardsplit/internal/model"
	"github.com/shardsplit/shardsplit/storage"
)

// One document per _id in a shard (storage's `_id` index).
//
// Half the workload's ids get a second routing value (unrouted ones a
// tenant, routed ones none or another tenant, one that routes the id to
// the same shard as its first in the initial table where there is one),
// and a third of the client operations on such an id use it. The model
// holds the two as two documents, "k3" and "k3@tenant-1": a write of either
// on the shard the other is on, in the node's table of the moment,
// replaces it, so the model records the other's delete beside it, ended
// the same way; a split may part them and a merge may bring both back to
// one shard, where both stay (as OpenSearch's shrink keeps them) until the
// next write of the _id there. A write parked in the handoff window may
// be applied under either table: the other's delete is then an outcome
// the model does not know (failed). A get names the document it returned
// by its routing value; the scans name every document so, and a document
// under a routing value the workload never used for its _id is one the
// model allows only absent.
//
// These draws come from a generator of their own (idRng), so that every
// draw of the seed's own generator keeps its meaning.
//
// After every step every active shard's `_id` entries must be exactly its
// routed documents, and a store of its own must hold no other shard's
// (storage.Shard.CheckIDIndex). Half the per-shard seeds (seed%32 >= 16)
// build their children's entries by deleting the parent's others
// (storage.IDIndexScanDelete), the rest by rebuilding them.

// drawPairs gives half the ids a second routing value (w.alts).
func (w *world) drawPairs() {
	w.idRng = rand.New(rand.NewPCG(w.seed, 0x1d))
	for i := range w.ids {
		if w.idRng.IntN(2) == 0 {
			continue
		}
		d := &w.ids[i]
		var cands []string
		if d.routing != "" {
			cands = append(cands, "")
		}
		for k := range 3 {
			if r := fmt.Sprintf("tenant-%d", k); r != d.routing {
				cands = append(cands, r)
			}
		}
		for k := range 6 {
			cands = append(cands, fmt.Sprintf("%s-alt-%d", d.id, k))
		}
		w.idRng.Shuffle(len(cands), func(a, b int) { cands[a], cands[b] = cands[b], cands[a] })
		p0, s0 := w.initial.Route(d.id, d.routing)
		alt := cands[0]
		for _, r := range cands {
			if p, s := w.initial.Route(d.id, r); s == s0 && w.initial.KeyOf(p) != w.initial.KeyOf(p0) {
				alt = r
				break
			}
		}
		d.paired, d.pair = true, alt
		w.alts = append(w.alts, docID{id: d.id, routing: alt, alt: true, paired: true, pair: d.routing})
	}
	w.tracef("ids", "%d of %d ids have a second routing value; children's _id entries: %s", len(w.alts), len(w.ids), w.idIndexBuild())
}

// idIndexBuild is how this seed's per-shard children build their `_id`
// entries.
func (w *world) idIndexBuild() storage.IDIndexBuild {
	if w.sw.layout == storage.LayoutPerShard && w.seed%32 >= 16 {
		return storage.IDIndexScanDelete
	}
	return storage.IDIndexRebuild
}

// key names a document in the model and the history.
func (d docID) key() string {
	if d.alt {
		return d.id + "@" + d.routing
	}
	return d.id
}

// partner is the id's document under its other routing value.
func (d docID) partner() (docID, bool) {
	if !d.paired {
		return docID{}, false
	}
	return docID{id: d.id, routing: d.pair, alt: !d.alt, paired: true, pair: d.routing}, true
}

// pick is the document a client operation on d acts on: now and then
// d's partner.
func (w *world) pick(d docID) docID {
	if p, ok := d.partner(); ok && w.idRng.IntN(3) == 0 {
		return p
	}
	return d
}

// docs are every document the workload writes but the bursts'.
func (w *world) docs() []docID {
	return append(append([]docID(nil), w.ids...), w.alts...)
}

// keyOf names a document a read returned: by its routing value.
func (w *world) keyOf(d storage.Doc) string {
	for _, x := range w.ids {
		if x.id != d.ID {
			continue
		}
		if p, ok := x.partner(); ok && d.Routing == p.routing {
			return p.key()
		}
		if d.Routing == x.routing {
			return x.key()
		}
		break
	}
	if d.Routing == "" {
		return d.ID // a burst's, or never written
	}
	return d.ID + "@" + d.Routing
}

// crossWrite is the delete of a written document's partner that the write
// makes when both are on one shard.
type crossWrite struct {
	key string
	w   *model.Write
}

// crossBegin records, beside a write of d about to be sent, the delete of
// d's partner the write makes if the node's table puts both on one shard
// (certain: ended as the write ends), or may make (parked: the write may
// be applied under the table a handoff publishes; always failed).
func (w *world) crossBegin(d docID, parked bool) *crossWrite {
	p, ok := d.partner()
	if !ok {
		return nil
	}
	t := w.n.Table()
	_, a := t.Route(d.id, d.routing)
	_, b := t.Route(p.id, p.routing)
	if a != b && !parked {
		return nil
	}
	return &crossWrite{key: p.key(), w: w.model.Begin(p.key(), "")}
}

// crossEnd ends a partner's delete as its write ended: acked, failed, or
// never (the process died).
func (w *world) crossEnd(x *crossWrite, client int, call int64, ended, acked bool) {
	if x == nil {
		return
	}
	switch {
	case !ended:
	case acked:
		w.model.Ack(x.w)
	default:
		w.model.Fail(x.w)
	}
	if call == 0 {
		w.hist.write(client, x.key, "", ended && acked)
	} else {
		w.hist.writeFrom(call, client, x.key, "", ended && acked)
	}
}

// checkGot checks what a get of d returned against the model and records
// it: a document of d's partner says d was absent.
func (w *world) checkGot(client int, d docID, doc storage.Doc, found bool) (string, string) {
	if !found {
		return d.key(), ""
	}
	got := w.keyOf(doc)
	if got != d.key() {
		if ok, allowed := w.model.Admits(d.key(), ""); !ok {
			w.fail("get %s returned %s's document %q; the model allows %s for %s", d.key(), got, readValue(doc), allowed, d.key())
		}
		w.hist.read(client, d.key(), "")
	}
	return got, readValue(doc)
}

// checkIDIndex checks that every active shard's `_id` entries are exactly
// its routed documents, and that a store of its own holds no other
// shard's entry once any keep-all cleanup has ended: whenever the node
// serves a table it did not check, and every eighth step (a scan of every
// shard: after every step it cost 60 seeds about a fifth more CPU time).
func (w *world) checkIDIndex(what string) {
	t, n := w.n.Table(), w.n // see search
	if t.Version() == w.idAt && w.step%8 != 0 || off.has("idindex") {
		return
	}
	w.idAt = t.Version()
	perShard := w.sw.layout == storage.LayoutPerShard
	var problems []string
	var err error
	if !w.do(func() {
		for _, id := range t.ActiveShards() {
			s, ok := n.ShardStore(id)
			if !ok {
				continue
			}
			o, _ := t.Shard(id)
			// The marker first: a keep-all cleanup drops its foreign
			// entries before it removes the marker, so once the marker
			// is gone a later snapshot holds none.
			pending, e := s.ForeignPending()
			if e != nil {
				err = fmt.Errorf("shard %d: %w", id, e)
				return
			}
			rep, e := s.CheckIDIndex(o.Span)
			if e != nil {
				err = fmt.Errorf("shard %d: %w", id, e)
				return
			}
			if !rep.OK() || perShard && !pending && rep.Outside != 0 {
				problems = append(problems, fmt.Sprintf("shard %d: %d routed documents without an _id entry %v, %d entries without a document %v, %d entries outside its span",
					id, rep.MissingCount, rep.Missing, rep.OrphanCount, rep.Orphans, rep.Outside))
			}
		}
	}) {
		return
	}
	if err != nil {
		if w.faulted() {
			return
		}
		w.fail("%s: _id index check failed with no fault injected: %v", what, err)
	}
	if len(problems) > 0 {
		w.fail("%s at table v%d: _id index: %s", what, t.Version(), strings.Join(problems, "; "))
	}
}
