package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/shardsplit/shardsplit/routing"
)

const routeUsage = `splitdemo route: print where documents land.

Usage:
  splitdemo route [flags] [--] ID...

Prints one JSON object per id, one per line, in argument order:
  {"id":…, "routing":…|null, "hash":…, "partition":…, "root":…, "shard":…, "table_version":…}
hash is murmur3 (x86_32, seed 0, UTF-16LE, signed) of the effective routing
value (--routing, else the id) before the partition offset; partition is the
routing slot floorMod(hash + offset, R); root is the original shard; shard is
the shard that owns the document after the given in-place splits and merges.

Flags come before the ids; "--" ends the flags, so ids may start with "-".

Flags:
  --shards N            index.number_of_shards (default 1)
  --routing-shards R    index.number_of_routing_shards (default: the create-index
                        default, N << max(1, 10 - ceil(log2 N)))
  --partition-size P    index.routing_partition_size (default 1)
  --routing VALUE       custom routing value for every id ("" routes by id)
  --mode MODE           split mode: partition (routing key = partition) or
                        opensearch (routing key = the hash, OpenSearch #20859)
                        (default partition)
  --split SHARD:N       split SHARD into N equal children and commit; repeatable,
                        applied in order
  --split SHARD@K1,K2   split SHARD at routing keys K1 < K2 < ... (partitions in
                        partition mode, signed hashes in opensearch mode)
  --merge A+B[+C...]    merge adjacent leaves A, B, ... of one root into one new
                        shard and commit; repeatable; --split and --merge are
                        applied in command-line order

Children get ids by OpenSearch's rule: holes left by cancelled splits first,
then ids above the highest id ever committed, in ascending order of range.
A merge's new shard gets its id by the same rule; merged ids are never reused.

Exit status 2 and one line on stderr naming the bad value on bad input.

Examples:
  splitdemo route --shards 8 user-42
  splitdemo route --shards 8 --split 2:2 --split 9:2 user-42 doc-1
  splitdemo route --shards 8 --mode opensearch --split 2:3 -- -leading-dash-id
  splitdemo route --shards 8 --split 2:4 --merge 9+10 user-42
`

// routeLine is one line of route's output; the field order is the contract.
type routeLine struct {
	ID           string  `json:"id"`
	Routing      *string `json:"routing"`
	Hash         int32   `json:"hash"`
	Partition    uint32  `json:"partition"`
	Root         uint32  `json:"root"`
	Shard        uint32  `json:"shard"`
	TableVersion uint64  `json:"table_version"`
}

// splitSpec is one --split flag.
type splitSpec struct {
	raw    string
	shard  routing.ShardID
	ways   int
	points []int64
}

func parseSplitSpec(s string) (splitSpec, error) {
	spec := splitSpec{raw: s}
	id, rest, ok := strings.Cut(s, ":")
	byPoints := false
	if !ok {
		if id, rest, ok = strings.Cut(s, "@"); !ok {
			return spec, fmt.Errorf("want SHARD:N or SHARD@K1,K2,...")
		}
		byPoints = true
	}
	shard, err := strconv.ParseUint(id, 10, 32)
	if err != nil {
		return spec, fmt.Errorf("shard %q is not a shard id", id)
	}
	spec.shard = routing.ShardID(shard)
	if !byPoints {
		if spec.ways, err = strconv.Atoi(rest); err != nil || spec.ways < 1 {
			return spec, fmt.Errorf("%q is not a number of children >= 1", rest)
		}
		return spec, nil
	}
	for k := range strings.SplitSeq(rest, ",") {
		v, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			return spec, fmt.Errorf("split point %q is not an integer", k)
		}
		spec.points = append(spec.points, v)
	}
	return spec, nil
}

// mergeSpec is one --merge flag.
type mergeSpec struct {
	raw    string
	shards []routing.ShardID
}

func parseMergeSpec(s string) (mergeSpec, error) {
	spec := mergeSpec{raw: s}
	for id := range strings.SplitSeq(s, "+") {
		shard, err := strconv.ParseUint(id, 10, 32)
		if err != nil {
			return spec, fmt.Errorf("shard %q is not a shard id (want A+B[+C...])", id)
		}
		spec.shards = append(spec.shards, routing.ShardID(shard))
	}
	return spec, nil
}

// tableOp is one --split or --merge flag, in command-line order.
type tableOp struct {
	split *splitSpec
	merge *mergeSpec
}

// applyOps applies each split or merge in order.
func applyOps(t *routing.Table, ops []tableOp) (*routing.Table, error) {
	var err error
	for _, op := range ops {
		if op.merge != nil {
			t, err = applyMerge(t, *op.merge)
		} else {
			t, err = applySplits(t, []splitSpec{*op.split})
		}
		if err != nil {
			return nil, err
		}
	}
	return t, nil
}

// applyMerge begins and commits one merge.
func applyMerge(t *routing.Table, m mergeSpec) (*routing.Table, error) {
	next, err := routing.Apply(t, routing.Edit{Kind: routing.BeginMerge, Sources: m.shards})
	if err != nil {
		return nil, fmt.Errorf("--merge %q: %w", m.raw, err)
	}
	rec, _ := next.MergeOf(m.shards[0])
	if t, err = routing.Apply(next, routing.Edit{Kind: routing.CommitMerge, Shard: rec.Target, Sources: m.shards}); err != nil {
		return nil, fmt.Errorf("--merge %q: commit: %w", m.raw, err)
	}
	return t, nil
}

// applySplits begins and commits each split in order.
func applySplits(t *routing.Table, specs []splitSpec) (*routing.Table, error) {
	for _, sp := range specs {
		e := routing.Edit{Kind: routing.BeginSplit, Shard: sp.shard, Ways: sp.ways}
		for _, v := range sp.points {
			k, err := t.Mode().KeyOf(v)
			if err != nil {
				return nil, fmt.Errorf("--split %q: %w", sp.raw, err)
			}
			e.Points = append(e.Points, k)
		}
		next, err := routing.Apply(t, e)
		if err != nil {
			return nil, fmt.Errorf("--split %q: %w", sp.raw, err)
		}
		rec, _ := next.Split(sp.shard)
		ids := make([]routing.ShardID, len(rec.Children))
		for i, c := range rec.Children {
			ids[i] = c.Shard
		}
		if t, err = routing.Apply(next, routing.Edit{Kind: routing.CommitSplit, Shard: sp.shard, Children: ids}); err != nil {
			return nil, fmt.Errorf("--split %q: commit: %w", sp.raw, err)
		}
	}
	return t, nil
}

func runRoute(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("route", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	shards := fs.Int("shards", 1, "")
	routingShards := fs.Int("routing-shards", 0, "")
	partitionSize := fs.Int("partition-size", 1, "")
	modeName := fs.String("mode", "partition", "")
	var routingValue *string
	fs.Func("routing", "", func(v string) error { routingValue = &v; return nil })
	var ops []tableOp
	fs.Func("split", "", func(v string) error {
		spec, err := parseSplitSpec(v)
		ops = append(ops, tableOp{split: &spec})
		return err
	})
	fs.Func("merge", "", func(v string) error {
		spec, err := parseMergeSpec(v)
		ops = append(ops, tableOp{merge: &spec})
		return err
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, routeUsage)
			return exitOK
		}
		return failUsage(stderr, err)
	}
	ids := fs.Args()
	// Parsing stops at the first id: a flag after it would be taken for
	// more ids. Ids may start with "-" only after "--".
	if first := len(args) - len(ids); first == 0 || args[first-1] != "--" {
		for _, id := range ids {
			if strings.HasPrefix(id, "-") && len(id) > 1 {
				return failUsage(stderr, fmt.Errorf("%q after the ids: flags come first, and ids that start with \"-\" after \"--\"", id))
			}
		}
	}
	lines, err := route(*shards, *routingShards, *partitionSize, *modeName, routingValue, ops, ids)
	if err != nil {
		return failUsage(stderr, err)
	}
	enc := json.NewEncoder(stdout)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			fmt.Fprintf(stderr, "splitdemo route: write: %v\n", err)
			return exitFail
		}
	}
	return exitOK
}

// route computes the output lines; every error names the bad value.
func route(shards, routingShards, partitionSize int, modeName string, routingValue *string, ops []tableOp, ids []string) ([]routeLine, error) {
	if len(ids) == 0 {
		return nil, errors.New("no ids given (usage: splitdemo route [flags] [--] ID...)")
	}
	mode, err := routing.ParseMode(modeName)
	if err != nil {
		return nil, fmt.Errorf("--mode %q: want partition or opensearch", modeName)
	}
	settings, err := routing.NewSettings("index", shards, routingShards, partitionSize)
	if err != nil {
		return nil, fmt.Errorf("--shards %d --routing-shards %d --partition-size %d: %w", shards, routingShards, partitionSize, err)
	}
	table, err := routing.NewTable(mode, settings)
	if err != nil {
		return nil, err
	}
	if table, err = applyOps(table, ops); err != nil {
		return nil, err
	}
	r := ""
	if routingValue != nil {
		r = *routingValue
	}
	lines := make([]routeLine, 0, len(ids))
	for _, id := range ids {
		if err := routing.ValidateID(id); err != nil {
			return nil, fmt.Errorf("id %q: %w", id, err)
		}
		p, shard := table.Route(id, r)
		l := routeLine{ID: id, Hash: p.Hash, Partition: p.Partition, Root: uint32(p.Root),
			Shard: uint32(shard), TableVersion: uint64(table.Version())}
		if r != "" {
			l.Routing = &r
		}
		lines = append(lines, l)
	}
	return lines, nil
}

func failUsage(stderr io.Writer, err error) int {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	fmt.Fprintf(stderr, "splitdemo route: %s\n", msg)
	return exitUsage
}
