#!/usr/bin/env bash
# Model-checks the replicated in-place split (design/model/split.pml) with Spin.
#
#   bash design/model/check.sh                 every property, both strategies
#   bash design/model/check.sh --list-mutants  the mutants: name, strategy, the rule it breaks
#   bash design/model/check.sh --mutant NAME [--shortest]
#                                              check one mutant; exits 1 with its counterexample
#                                              (--shortest: breadth-first, the shortest one)
#   bash design/model/check.sh --all-mutants   check that every mutant is caught, each timed
#   bash design/model/check.sh --cycles        also look for cycles (pan -l with no progress
#                                              labels, so any cycle is one): there are none, so
#                                              every run is finite and L1 covers liveness fully
#
# Exit status: 0 when every property holds, 1 when one does not (for a mutant
# that is the expected outcome), 2 on a usage or tool error.
#
# Each strategy gets two searches, exhaustive (no bitstate, no hash compaction:
# COLLAPSE compression keeps a search near 0.6 GiB):
#   safety    assertions and end states: I2, I3/I4, I5, I7, R1 and L1 (every
#             state where nothing can move has the split ended and every write
#             acknowledged unless its shard is red; a write ends within MAXATT
#             attempts);
#   liveness  L2, `<> ended` under weak fairness (pan -a -f).
# Two searches run at a time (2 cores), each bounded at MEMLIM_MB.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=$here/split.pml
memlim_mb=${MEMLIM_MB:-8192}
depth=${DEPTH:-20000}

# name|strategy|define|what it gets wrong
mutants='promote-parent-replica-after-handoff|recover|MUTANT_PROMOTE_PARENT_REPLICA_AFTER_HANDOFF|after the hand-off record, a failed parent primary is handled by the pre-record rule (promote a parent replica, abandon the split)
ack-before-insync-removal|recover|MUTANT_ACK_BEFORE_INSYNC_REMOVAL|a primary acknowledges a write a copy missed before the cluster state has removed that copy from the in-sync set
handoff-before-children-in-sync|recover|MUTANT_HANDOFF_BEFORE_CHILDREN_IN_SYNC|the hand-off waits for the child primaries only, not for the child replicas to be in sync (the handoff-first control)
coordinator-retries-old-owner|recover|MUTANT_COORDINATOR_RETRIES_OLD_OWNER|a coordinator refused by the retired parent retries the parent instead of routing by a newer cluster state
lose-handoff-record|recover|MUTANT_LOSE_HANDOFF_RECORD|the hand-off record is published before it is durable, so a cluster-manager failover loses it
insync-at-gcp-only|recover|MUTANT_INSYNC_AT_GCP_ONLY|a recovering child replica is marked in sync once its LCP reaches the GCP, without the ops assigned before its tracking began
insync-at-gcp-only-local|local|MUTANT_INSYNC_AT_GCP_ONLY|the same rule under local: the replayed history of the parent replica may lag the primary
local-cut-above-checkpoint|local|MUTANT_LOCAL_CUT_ABOVE_CHECKPOINT|the agreed cut is the primary'"'"'s max seq, not the global checkpoint, so a parent replica may split before it holds the cut
children-visible-before-parent-retired|recover|MUTANT_CHILDREN_VISIBLE_BEFORE_PARENT_RETIRED|the record makes the children search-visible while the parent stays visible until the commit
parent-serves-reads-in-handoff|recover|MUTANT_PARENT_SERVES_READS_IN_HANDOFF|the parent answers realtime gets while its permits are blocked for the hand-off
promote-out-of-sync-replica|recover|MUTANT_PROMOTE_OUT_OF_SYNC_REPLICA|a failed primary is replaced by any live copy of the shard (a stale-primary allocation), not only an in-sync one
child-lcp-skips-filtered|recover|MUTANT_CHILD_LCP_SKIPS_FILTERED|a child copy does not advance its local checkpoint over the parent operations it filters out'

die() { echo "check.sh: $*" >&2; exit 2; }

now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.1f", a - b }'; }

need_tools() {
  command -v spin >/dev/null || die "spin not found (Debian: apt-get install -y spin)"
  command -v gcc >/dev/null || die "gcc not found"
}

strategy_flags() {
  case $1 in
    recover) echo "" ;;
    local) echo "-DLOCAL" ;;
    *) die "unknown strategy $1" ;;
  esac
}

# build DIR KIND SPINFLAGS: generate and compile a verifier in DIR.
build() {
  local dir=$1 kind=$2 flags=$3 cflags
  case $kind in
    safety) cflags="-DSAFETY -DNOCLAIM" ;;
    shortest) cflags="-DSAFETY -DNOCLAIM -DBFS" ;;
    liveness) cflags="-DNFAIR=4" ;;
    cycles) cflags="-DNP -DNOCLAIM" ;;
  esac
  mkdir -p "$dir"
  cp "$model" "$dir/split.pml"
  (cd "$dir" && spin -a $flags split.pml >spin.out 2>&1) || { cat "$dir/spin.out" >&2; die "spin -a failed"; }
  (cd "$dir" && gcc -O2 -w $cflags -DCOLLAPSE -DMEMLIM=$memlim_mb -o pan pan.c 2>gcc.out) ||
    { cat "$dir/gcc.out" >&2; die "gcc failed"; }
}

# search DIR KIND: run the verifier; its report goes to DIR/pan.out.
search() {
  local dir=$1 kind=$2 args="-m$depth"
  [ "$kind" = liveness ] && args="$args -a -f -N ends"
  [ "$kind" = shortest ] && args=""
  [ "$kind" = cycles ] && args="$args -l"
  local t0; t0=$(now)
  (cd "$dir" && ./pan $args >pan.out 2>&1) || true
  since "$t0" >"$dir/wall"
}

# verdict DIR: "ok" or "fail"; a search that did not finish is an error.
verdict() {
  local out=$1/pan.out
  grep -q "errors: 0" "$out" && ! grep -q "Search not completed\|max search depth too small\|out of memory" "$out" && { echo ok; return; }
  grep -q "errors: [1-9]" "$out" && { echo fail; return; }
  cat "$out" >&2
  die "the search in $1 did not finish"
}

summary() {   # summary DIR LABEL
  local out=$1/pan.out stored visited depthr
  stored=$(awk '/states, stored/ {print $1; exit}' "$out")
  visited=$(sed -n 's/.*states, stored (\([0-9.e+]*\) visited).*/, \1 visited/p' "$out" | head -1)
  depthr=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$out" | head -1)
  printf '%-18s %10s states stored%s, depth %s, %5.1f s\n' "$2:" "$stored" "$visited" "$depthr" "$(cat "$1/wall")"
}

# trace DIR SPINFLAGS: the counterexample, one event a line, names for ids.
trace() {
  local dir=$1 flags=$2 line
  (cd "$dir" && spin -t $flags split.pml >trace.out 2>&1) || true
  awk '
    function copy(i,   c) { c = substr("P R A0A1B0B1- ", 2 * i + 1, 2); gsub(/ /, "", c); return c == "-" ? "none" : c }
    function names(m,   s, i) { s = ""; for (i = 0; i < 6; i++) if (int(m / 2 ^ i) % 2) s = s (s == "" ? "" : " ") copy(i); return s == "" ? "none" : s }
    function shard(i) { return i == 0 ? "parent" : i == 1 ? "child A" : "child B" }
    function tr(s,   out, t, m) {
      out = ""
      while (match(s, /<[0-9]+>|\{[0-9]+\}|\[[0-9]+\]/)) {
        t = substr(s, RSTART, RLENGTH); m = substr(t, 2, RLENGTH - 2) + 0
        out = out substr(s, 1, RSTART - 1)
        if (t ~ /^</) out = out copy(m)
        else if (t ~ /^\{/) out = out "{" names(m) "}"
        else out = out shard(m)
        s = substr(s, RSTART + RLENGTH)
      }
      return out s
    }
    /MSC: / { sub(/^.*MSC: /, ""); n++; printf "  %3d  %s\n", n, tr($0); next }
    /START OF CYCLE/ { print "       -- the run loops from here --"; next }
    /assertion violated/ { if (match($0, /split.pml:[0-9]+/)) al = substr($0, RSTART + 10, RLENGTH - 10) }
  END { print al > "'"$dir"'/assert.line" }
  ' "$dir/trace.out"
  line=$(cat "$dir/assert.line")
  if [ -n "$line" ]; then
    echo "  violated: $(sed -n "${line}p" "$dir/split.pml" | sed -n 's|.*/\* *\(.*\) \*/.*|\1|p')"
  elif grep -q "acceptance cycle" "$dir/pan.out"; then
    echo "  violated: L2, the split never ends (an accepting cycle under weak fairness)"
  elif grep -q "invalid end state" "$dir/pan.out"; then
    echo "  violated: L1, a process is stuck:"
    grep -E "^ *[0-9]+:\s+proc" "$dir/trace.out" | grep -v "valid end state" | sed 's/^ */    /'
  fi
}

check_all() {   # check_all KIND...
  need_tools
  local t0=$SECONDS s k v status=0
  echo "spin $(spin -V | awk '{print $3}'), model $model"
  for k in "$@"; do
    for s in recover local; do build "$work/$s-$k" "$k" "$(strategy_flags "$s")"; done
    for s in recover local; do search "$work/$s-$k" "$k" & done
    wait
    for s in recover local; do
      summary "$work/$s-$k" "$s $k"
      v=$(verdict "$work/$s-$k") || exit 2
      if [ "$v" = fail ]; then
        echo "FAIL: $s $k; counterexample:"
        trace "$work/$s-$k" "$(strategy_flags "$s")"
        status=1
      fi
    done
  done
  [ $status = 0 ] && echo "every property holds ($((SECONDS - t0)) s)"
  return $status
}

mutant_line() {
  local line
  line=$(printf '%s\n' "$mutants" | awk -F'|' -v n="$1" '$1 == n')
  [ -n "$line" ] || die "no mutant named $1 (see --list-mutants)"
  echo "$line"
}

# check_mutant NAME [--shortest]: 1 and a trace when some property fails, 0
# when none does.
check_mutant() {
  need_tools
  local name strategy define what flags k t0 first=safety line v
  line=$(mutant_line "$1") || exit 2
  IFS='|' read -r name strategy define what <<<"$line"
  flags="$(strategy_flags "$strategy") -D$define"
  [ "${2:-}" = --shortest ] && { first=shortest; flags="$flags -DSHORTEST"; }
  echo "mutant $name ($strategy): $what"
  t0=$(now)
  for k in $first liveness; do
    build "$work/$k" "$k" "$flags"
    search "$work/$k" "$k"
    v=$(verdict "$work/$k") || exit 2
    if [ "$v" = fail ]; then
      echo "caught by the $k search: $(awk '/states, stored/ {print $1; exit}' "$work/$k/pan.out") states," \
        "search $(cat "$work/$k/wall") s, $(since "$t0") s with the builds; the counterexample:"
      trace "$work/$k" "$flags"
      return 1
    fi
  done
  echo "NOT caught: every property holds under this mutant"
  return 0
}

all_mutants() {
  local name missed=0 out rc
  while IFS='|' read -r name _; do
    rc=0; out=$(bash "$0" --mutant "$name" 2>&1) || rc=$?
    if [ $rc = 0 ]; then
      echo "NOT CAUGHT  $name"; missed=1
    elif [ $rc != 1 ]; then
      printf '%s\n' "$out" >&2; die "checking mutant $name failed"
    else
      printf 'caught  %-40s %-44s %s\n' "$name" \
        "$(printf '%s\n' "$out" | sed -n 's/^  violated: //p' | head -1)" \
        "$(printf '%s\n' "$out" | sed -n 's/^caught by the \([a-z]*\) search: \([0-9]*\) states, search \([0-9.]*\) s, \([0-9.]*\) s.*/\1: \2 states, \3 s (\4 s with builds)/p')"
    fi
  done <<<"$mutants"
  return $missed
}

case ${1:-} in
  "") check_all safety liveness ;;
  --cycles) check_all cycles ;;
  --list-mutants) printf '%s\n' "$mutants" | awk -F'|' '{printf "%-40s %-8s %s\n", $1, $2, $4}' ;;
  --mutant)
    [ $# = 2 ] || [ $# = 3 -a "${3:-}" = --shortest ] || die "usage: check.sh --mutant NAME [--shortest]"
    check_mutant "$2" "${3:-}" ;;
  --all-mutants) all_mutants ;;
  *) die "usage: check.sh [--list-mutants | --mutant NAME [--shortest] | --all-mutants | --cycles]" ;;
esac
