# Sourced by the labs: the server's address, a JSON curl, and a check.
# ES is a running `splitdemo serve` (default http://127.0.0.1:9200);
# DATA is its --data directory (the hard-link lab counts inodes there).
set -euo pipefail
ES=${ES:-http://127.0.0.1:9200}
DATA=${DATA:-./splitdemo-data}

# j METHOD PATH [BODY]: one request, its body printed on one line.
j() {
  local method=$1 path=$2
  shift 2
  if [ $# -gt 0 ]; then
    curl -sS -X "$method" "$ES$path" -H 'Content-Type: application/json' -d "$1"
  else
    curl -sS -X "$method" "$ES$path"
  fi
  echo
}

# field NAME: the first numeric or string value of "NAME" in the JSON on stdin.
field() { grep -o "\"$1\":\"\\?[^,\"}]*" | head -1 | sed 's/^"[^"]*":"\{0,1\}//'; }

# check WHAT GOT WANT
check() {
  if [ "$2" != "$3" ]; then
    echo "FAIL: $1: got [$2], want [$3]" >&2
    exit 1
  fi
  echo "ok: $1 = $3"
}

# uuid INDEX: the index's uuid (its data directory is $DATA/indices/<uuid>).
uuid() { curl -sS "$ES/_cat/indices/$1?h=uuid" | tr -d ' \n'; }

# shared_files A B: how many files of index A's directory are hard links to
# files of index B's directory (same inode).
shared_files() {
  local a="$DATA/indices/$(uuid "$1")" b="$DATA/indices/$(uuid "$2")"
  comm -12 <(find "$a" -type f -name '*.sst' -exec stat -c %i {} + | sort -u) \
           <(find "$b" -type f -name '*.sst' -exec stat -c %i {} + | sort -u) | wc -l | tr -d ' '
}
