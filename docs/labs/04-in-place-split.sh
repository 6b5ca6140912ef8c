#!/usr/bin/env bash
# Lab 4: labs 1 and 2 again, with an in-place split of shard 2 instead of
# a new index: no write block, the same index, user-42 moves to a child.
# Then the children are merged back in place (our extension).
source "$(dirname "$0")/common.sh"

j DELETE /lab4 >/dev/null
j PUT /lab4 '{"settings":{"number_of_shards":8,"number_of_replicas":0}}'
bulk=""
for i in $(seq 1 400); do bulk+="{\"index\":{\"_id\":\"doc-$i\"}}"$'\n'"{\"n\":$i}"$'\n'; done
curl -sS -XPOST "$ES/lab4/_bulk" -H 'Content-Type: application/x-ndjson' --data-binary "$bulk" >/dev/null
j PUT /lab4/_doc/user-42 '{"user":"user-42"}'
j POST /lab4/_flush >/dev/null
check "user-42 before the split" "$(j POST '/lab4/_search_shards?routing=user-42' | field shard)" 2
task=$(j POST /lab4/_shards/2/_split '{"number_of_splits":2}' | field task)
echo "split task: $task"
curl -sS "$ES/_cat/shards/lab4?v"            # during the split: 2 SPLITTING, 8 and 9 INITIALIZING
check "the task finished" "$(j GET "/_tasks/$task?wait_for_completion=true" | field completed)" true
j GET "/_tasks/$task"
curl -sS "$ES/_cat/shards/lab4?v&s=shard"
# Partition 361 of root 2 (partitions 256..383) goes to the second child,
# as `splitdemo route --shards 8 --split 2:2 user-42` says: shard 9.
check "user-42 after the split" "$(j POST '/lab4/_search_shards?routing=user-42' | field shard)" 9
check "user-42 found on its child" "$(j GET /lab4/_doc/user-42 | field found)" true
check "documents after the split" "$(j GET /lab4/_count | field count)" 401
# What the children got from the parent: table files are hard-linked, the
# WAL (writes not yet flushed to a table file) is copied.
res=$(j GET "/_tasks/$task")
echo "linked_bytes=$(echo "$res" | field linked_bytes) copied_bytes=$(echo "$res" | field copied_bytes)"
for c in 8 9; do
  echo "shard-$c table files and their link counts:"
  find "$DATA/indices/$(uuid lab4)/shard-$c" -name '*.sst' -exec stat -c '  %h links  %n' {} +
done
# Merge the children back (our extension; OpenSearch has no merge): a task
# like the split, the children MERGING and the target INITIALIZING while it
# runs. Adjacent leaves only: 8 and 9 are; 8 and 3 are in different roots.
check "a merge of shards in different roots" "$(j POST /lab4/_shards/_merge '{"shards":[8,3]}' | field status)" 400
task=$(j POST /lab4/_shards/_merge '{"shards":[8,9]}' | field task)
echo "merge task: $task"
curl -sS "$ES/_cat/shards/lab4?v"            # during the merge: 8 and 9 MERGING, 10 INITIALIZING
check "the merge finished" "$(j GET "/_tasks/$task?wait_for_completion=true" | field completed)" true
j GET "/_tasks/$task"
curl -sS "$ES/_cat/shards/lab4?v&s=shard"    # 10 STARTED; 2, 8 and 9 gone
# The target takes the next id (8 and 9 are never reused), as
# `splitdemo route --shards 8 --split 2:2 --merge 8+9 user-42` says: shard 10.
check "user-42 after the merge" "$(j POST '/lab4/_search_shards?routing=user-42' | field shard)" 10
check "user-42 found on the target" "$(j GET /lab4/_doc/user-42 | field found)" true
check "documents after the merge" "$(j GET /lab4/_count | field count)" 401
echo "lab 4 passed"
