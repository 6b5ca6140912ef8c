#!/usr/bin/env bash
# Lab 1: compute by hand where user-42 lands, then confirm it with the API.
source "$(dirname "$0")/common.sh"

cat <<'TXT'
By hand, OpenSearch's OperationRouting for an 8-shard index:
  hash      = murmur3_x86_32(UTF-16LE("user-42"), seed 0) = -1591625367
  R         = number_of_routing_shards (the default for 8)  = 1024
  partition = floorMod(-1591625367, 1024)                  = 361
  shard     = 361 / (R / 8) = 361 / 128                     = 2
TXT
j DELETE /lab1 >/dev/null
j PUT /lab1 '{"settings":{"number_of_shards":8,"number_of_replicas":0}}'
j PUT '/lab1/_doc/user-42?refresh=true' '{"user":"user-42"}'
ss=$(j POST '/lab1/_search_shards?routing=user-42')
echo "$ss"
check "_search_shards?routing=user-42: shard" "$(echo "$ss" | field shard)" 2
check "routing_num_shards" "$(j GET /_cluster/state/metadata/lab1 | field routing_num_shards)" 1024
curl -sS "$ES/_cat/shards/lab1?v&h=index,shard,state,docs"
check "documents on shard 2" "$(curl -sS "$ES/_cat/shards/lab1?h=shard,docs" | awk '$1==2{print $2}')" 1
check "user-42 found where routing says" "$(j GET '/lab1/_doc/user-42?routing=user-42' | field found)" true
echo "lab 1 passed"
