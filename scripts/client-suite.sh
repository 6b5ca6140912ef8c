#!/usr/bin/env bash
# Runs the official Go client's own integration suite (opensearch-go, its
# `integration` build tag, plain HTTP), unmodified, against `splitdemo serve`
# on a free loopback port, and prints pass/fail/skip per top-level test.
#
#   scripts/client-suite.sh [OUTDIR]        (default: a temp dir)
#
# Needs the network once (the module download from the Go module proxy);
# not part of `go test ./...`. Environment:
#   CLIENT_VERSION  module version (default v4.8.1)
#   CLIENT_PKGS     packages of the module to run (default ./opensearchapi/...)
#   CLIENT_RUN      -run pattern (default: every test)
#   CLIENT_TIMEOUT  go test -timeout (default 20m)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
version=${CLIENT_VERSION:-v4.8.1}
pkgs=${CLIENT_PKGS:-./opensearchapi/...}
out=${1:-$(mktemp -d)}
mkdir -p "$out"
work=$(mktemp -d)
server_pid=
cleanup() {
	if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

dir=$(cd "$work" && go mod download -json "github.com/opensearch-project/opensearch-go/v4@$version" | jq -r .Dir)
cp -r "$dir" "$work/client"
chmod -R u+w "$work/client"

(cd "$repo" && go build -o "$work/splitdemo" ./cmd/splitdemo)
"$work/splitdemo" serve --addr 127.0.0.1:0 --data "$work/data" --log-level warn >"$out/server.out" 2>"$out/server.err" &
server_pid=$!
url=
for _ in $(seq 1 300); do
	url=$(grep -o 'http://127.0.0.1:[0-9]*' "$out/server.out" | head -1 || true)
	[ -n "$url" ] && break
	kill -0 "$server_pid" 2>/dev/null || { echo "server exited" >&2; cat "$out/server.err" >&2; exit 1; }
	sleep 0.1
done
[ -n "$url" ] || { echo "server did not start" >&2; exit 1; }
echo "server: $url (pid $server_pid)" >&2

run=()
[ -n "${CLIENT_RUN:-}" ] && run=(-run "$CLIENT_RUN")
(cd "$work/client" && SECURE_INTEGRATION=false OPENSEARCH_URL="$url" \
	go test -tags integration,core -count=1 -p 1 -timeout "${CLIENT_TIMEOUT:-20m}" -json "${run[@]}" $pkgs) >"$out/test.json" 2>"$out/test.err" || true

# Per top-level test: its leaf tests (a test with no subtests is its own
# leaf) passed, failed, skipped; "refused" counts the failures whose
# output shows the server refusing clearly (400 "no handler found" for an
# API it does not have, or a "not supported by shardsplit" refusal).
jq -rs '
  ([ .[] | select(.Test != null and .Action == "output") ] | group_by(.Test)
    | map({key: .[0].Test, value: (map(.Output) | add)}) | from_entries) as $out
  | [ .[] | select(.Test != null and (.Action == "pass" or .Action == "fail" or .Action == "skip")) ] as $ev
  | ($ev | map(.Test)) as $names
  | [ $ev[] | . as $e | select(([$names[] | select(startswith($e.Test + "/"))] | length) == 0) ]
  | map(. + {refused: (.Action == "fail" and (($out[.Test] // "") | test("no handler found|not supported by shardsplit")))})
  | group_by(.Test | split("/")[0])
  | map({test: (.[0].Test | split("/")[0]),
         pass: map(select(.Action == "pass")) | length,
         fail: map(select(.Action == "fail")) | length,
         refused: map(select(.refused)) | length,
         skip: map(select(.Action == "skip")) | length})
  | (.[] | "\(.test)\tpass \(.pass)\tfail \(.fail)\t(refused \(.refused))\tskip \(.skip)"),
    "TOTAL\tpass \(map(.pass) | add)\tfail \(map(.fail) | add)\t(refused \(map(.refused) | add))\tskip \(map(.skip) | add)"
' "$out/test.json" | column -t -s $'\t' | tee "$out/summary.txt"
grep -c '"status":5[0-9][0-9]' "$out/test.json" | sed 's/^/5xx bodies seen in test output: /' || true
if grep -q 'panic' "$out/server.err"; then echo "server log mentions a panic: $out/server.err"; fi
echo "output: $out"
