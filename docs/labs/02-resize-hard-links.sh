#!/usr/bin/env bash
# Lab 2: write block, then _split, _shrink and _clone; the targets share
# the source's files (hard links: the same inodes in the data directory).
source "$(dirname "$0")/common.sh"

for i in lab2 lab2-split lab2-shrink lab2-clone; do j DELETE "/$i" >/dev/null; done
j PUT /lab2 '{"settings":{"number_of_shards":2,"number_of_replicas":0}}'
bulk=""
for i in $(seq 1 200); do bulk+="{\"index\":{\"_id\":\"doc-$i\"}}"$'\n'"{\"n\":$i}"$'\n'; done
out=$(curl -sS -XPOST "$ES/lab2/_bulk" -H 'Content-Type: application/x-ndjson' --data-binary "$bulk")
echo "${out:0:60}..."

echo "# a resize needs the write block first:"
check "_split without the block" "$(j PUT /lab2/_split/lab2-split '{"settings":{"index.number_of_shards":4}}' | field type)" illegal_state_exception
j PUT /lab2/_settings '{"index.blocks.write":true}'
check "a write to the blocked source" "$(j PUT /lab2/_doc/x '{}' | field type)" cluster_block_exception

# The targets inherit the block unless the request clears it (null).
j PUT /lab2/_split/lab2-split '{"settings":{"index.number_of_shards":4,"index.blocks.write":null}}'
j PUT /lab2/_shrink/lab2-shrink '{"settings":{"index.number_of_shards":1,"index.blocks.write":null}}'
j PUT /lab2/_clone/lab2-clone '{"settings":{"index.blocks.write":null}}'
curl -sS "$ES/_cat/indices/lab2*?v&h=index,pri,docs.count,store.size&s=index"
for t in split shrink clone; do
  check "lab2-$t documents" "$(j GET /lab2-$t/_count | field count)" 200
  n=$(shared_files lab2 lab2-$t)
  echo "lab2-$t shares $n table file(s) with lab2"
  [ "$n" -gt 0 ] || { echo "FAIL: lab2-$t shares no files with lab2" >&2; exit 1; }
done
echo "# source files and their link counts:"
find "$DATA/indices/$(uuid lab2)" -name '*.sst' -exec stat -c '%h links  %n' {} +
echo "lab 2 passed"
