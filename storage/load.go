package storage

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/shardsplit/shardsplit/routing"
)

// Load statistics: what a load-based split policy needs of a shard, kept
// always, so they must cost (almost) nothing on the write path.
//
//   - counters: documents written by client writes (Write; a split's replay
//     into a child is not load) and reads (GetAny, Scan, ScanSpan), two
//     atomic adds per request, no lock, no allocation;
//   - a sample of written routing keys: each write is offered with
//     probability 1/SampleEvery (a hash of the write's number: no shared
//     random state on the hot path) to a
//     fixed-size reservoir (Vitter's algorithm R, as CockroachDB's load
//     split finder samples request keys), under a small mutex, without
//     allocating: an entry keeps the request's routing value (or its _id
//     when unrouted) by reference.
//
// The reservoir covers the writes since the last LoadSample, which empties
// it: the caller drains it once per statistics interval. Size comes from
// Pebble's metadata (EstimateSize), never from a scan.

const (
	// SampleEvery: one write in this many is offered to the key sample.
	SampleEvery = 8
	// ReservoirSize bounds the key sample of one shard.
	ReservoirSize = 256
)

// KeySample is one sampled write.
type KeySample struct {
	Key routing.Key
	// Value is the write's routing value, or its _id when it had none: the
	// "hot key" a policy names when it cannot split a leaf of one partition.
	Value string
}

// LoadSample is a shard's load statistics at one instant.
type LoadSample struct {
	Writes uint64 // documents written by client writes since the shard was opened
	Reads  uint64 // gets and scans since the shard was opened
	// Sampled is how many writes were offered to the reservoir since the
	// previous LoadSample (about one in SampleEvery); Keys holds
	// min(Sampled, ReservoirSize) of them, a uniform sample, so each entry
	// stands for Sampled*SampleEvery/len(Keys) writes.
	Sampled uint64
	Keys    []KeySample
}

// loadStats is a shard's counters and key reservoir.
type loadStats struct {
	writes atomic.Uint64
	reads  atomic.Uint64

	mu      sync.Mutex
	sampled uint64 // offered since the last drain
	rng     uint64 // xorshift64 state (deterministic per shard)
	seed    uint64 // scatters the sampling decision (fixed per shard)
	n       int    // entries filled
	res     [ReservoirSize]KeySample
}

// countWrites counts a client write of ops and samples each op with
// probability 1/SampleEvery. It does not allocate.
//
// Whether write number m is sampled is decided by a hash of m and the
// shard's seed (splitmix64's finaliser), not by m mod SampleEvery: a
// periodic write pattern (say, two keys alternating) would otherwise alias
// with the sampling and show only one of its keys.
func (l *loadStats) countWrites(ops []Op) {
	k := uint64(len(ops))
	first := l.writes.Add(k) - k // ops[i] is write number first+i+1
	for i := range ops {
		if mix64(first+uint64(i)+1+l.seed)%SampleEvery != 0 {
			continue
		}
		op := &ops[i]
		v := op.Routing
		if v == "" {
			v = op.ID
		}
		l.offer(KeySample{Key: op.Key, Value: v})
	}
}

// mix64 is splitmix64's finaliser: a bijection that scatters consecutive
// inputs.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// offer adds a sample to the reservoir (algorithm R).
func (l *loadStats) offer(s KeySample) {
	l.mu.Lock()
	l.sampled++
	if l.n < len(l.res) {
		l.res[l.n] = s
		l.n++
	} else if j := l.next() % l.sampled; j < uint64(len(l.res)) {
		l.res[j] = s
	}
	l.mu.Unlock()
}

// next steps the xorshift64 generator; called under mu.
func (l *loadStats) next() uint64 {
	x := l.rng
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	l.rng = x
	return x
}

// drain appends the reservoir to buf and empties it.
func (l *loadStats) drain(buf []KeySample) LoadSample {
	l.mu.Lock()
	buf = append(buf, l.res[:l.n]...)
	clear(l.res[:l.n])
	s := LoadSample{Sampled: l.sampled, Keys: buf}
	l.sampled, l.n = 0, 0
	l.mu.Unlock()
	s.Writes, s.Reads = l.writes.Load(), l.reads.Load()
	return s
}

// LoadSample returns the shard's counters and drains its key sample into
// buf (appended; pass nil or a reused slice).
func (s *Shard) LoadSample(buf []KeySample) LoadSample {
	return s.load.drain(buf)
}

// EstimateSize estimates the bytes the shard's documents take on disk, from
// Pebble's table metadata (EstimateDiskUsage over the owned spans; no scan).
// Documents still only in the memtable and WAL are not counted.
func (s *Shard) EstimateSize() (uint64, error) {
	if s.closed.Load() || !s.st.enter() {
		return 0, ErrShardClosed
	}
	defer s.st.exit()
	var total uint64
	for _, sp := range s.Owned() {
		lo, hi := SpanBounds(s.keyspace, sp)
		n, err := s.st.db.EstimateDiskUsage(lo, hi)
		if err != nil {
			return 0, fmt.Errorf("storage: shard %d: estimate size of %s: %w", s.id, sp, err)
		}
		total += n
	}
	return total, nil
}
