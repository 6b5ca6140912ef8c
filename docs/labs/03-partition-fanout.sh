#!/usr/bin/env bash
# Lab 3: custom routing with routing_partition_size: a tenant's documents
# spread over P shards, and a routed search reaches only those P shards
# instead of all of them (measured with _search_shards).
source "$(dirname "$0")/common.sh"

for i in lab3 lab3-default; do j DELETE "/$i" >/dev/null; done
# R = N = 8 so that P consecutive routing slots are P different shards.
j PUT /lab3 '{"settings":{"number_of_shards":8,"number_of_routing_shards":8,"index.routing_partition_size":3,"number_of_replicas":0},"mappings":{"_routing":{"required":true}}}'
# The default R (1024 for 8 shards): P consecutive slots are almost always
# in one shard (OpenSearch #17472: partitions collapse).
j PUT /lab3-default '{"settings":{"number_of_shards":8,"index.routing_partition_size":3,"number_of_replicas":0},"mappings":{"_routing":{"required":true}}}'
for idx in lab3 lab3-default; do
  bulk=""
  for t in a b c d; do
    for i in $(seq 1 30); do bulk+="{\"index\":{\"_id\":\"$t-$i\",\"routing\":\"tenant-$t\"}}"$'\n'"{\"tenant\":\"$t\"}"$'\n'; done
  done
  curl -sS -XPOST "$ES/$idx/_bulk" -H 'Content-Type: application/x-ndjson' --data-binary "$bulk" >/dev/null
done
groups() { j POST "/$1/_search_shards$2" | grep -o '"shard":[0-9]*' | wc -l | tr -d ' '; }
check "lab3: shards searched without routing" "$(groups lab3 '')" 8
for t in a b c d; do
  check "lab3: shards searched for tenant-$t" "$(groups lab3 "?routing=tenant-$t")" 3
  check "lab3: tenant-$t documents found by the routed search" \
    "$(j POST "/lab3/_count?routing=tenant-$t" '{"query":{"term":{"_routing":"tenant-'$t'"}}}' | field count)" 30
  echo "lab3-default: tenant-$t searches $(groups lab3-default "?routing=tenant-$t") shard(s)"
done
curl -sS "$ES/_cat/shards/lab3?v&h=index,shard,docs"
echo "lab 3 passed"
