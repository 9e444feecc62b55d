#!/usr/bin/env bash
# Load benchmark of the reference server with wrk (apt-get install -y wrk).
#
# Starts a release build of `ferry serve --db memory` on a free port, seeds it with $ROWS rows over
# HTTP, then measures with wrk:
#   - baseline:   GET /health                      (the HTTP stack and one catalog read)
#   - page query: GET /tables/bench?$filter=n ge 100&$orderby=updatedAt&$top=50   (50 rows, in SQL)
#   - page (id):  GET /tables/bench?$top=50        (50 rows in the default id order)
#   - read by id: GET /tables/bench/b<random>
# and prints requests/s, p99 latency and the ratio of each to the baseline measured in the same run.
#
# Usage: Tools/bench-server.sh [duration-seconds] (from anywhere; builds Apps/.build/release/ferry when missing)
# Environment: ROWS (default 10000), THREADS (2), CONNECTIONS (16), FERRY (path to the binary).
set -euo pipefail
cd "$(dirname "$0")/../Apps"

DURATION="${1:-10}"
ROWS="${ROWS:-10000}"
THREADS="${THREADS:-2}"
CONNECTIONS="${CONNECTIONS:-16}"
FERRY="${FERRY:-.build/release/ferry}"

command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install -y wrk)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 is needed to seed the rows" >&2; exit 1; }
if [[ ! -x "$FERRY" ]]; then
    echo "== building the release ferry binary"
    swift build -c release --product ferry
fi

work="$(mktemp -d)"
server_pid=""
cleanup() {
    if [[ -n "$server_pid" ]]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

cat > "$work/tables.json" <<'JSON'
{ "dynamicTables": false, "tables": { "bench": { "pageSize": 50, "maxTop": 1000 } } }
JSON

"$FERRY" serve --port 0 --db memory --tables "$work/tables.json" --log-level warning > "$work/out" 2> "$work/err" &
server_pid=$!
for _ in $(seq 1 100); do
    grep -q "listening on" "$work/out" 2>/dev/null && break
    sleep 0.1
done
url="$(grep -o 'http://[0-9.:]*' "$work/out" | head -1)"
[[ -n "$url" ]] || { echo "the server did not start:" >&2; cat "$work/err" >&2; exit 1; }
echo "== server $url (pid $server_pid), seeding $ROWS rows"

python3 - "$url" "$ROWS" <<'PY'
import http.client, json, sys, urllib.parse
url, rows = sys.argv[1], int(sys.argv[2])
parsed = urllib.parse.urlparse(url)
connection = http.client.HTTPConnection(parsed.hostname, parsed.port)
for i in range(rows):
    body = json.dumps({"id": "b%d" % i, "n": i, "title": "Row %d" % i, "done": i % 2 == 0})
    connection.request("POST", "/tables/bench", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    if response.status != 201:
        sys.exit("seeding failed at row %d: HTTP %d" % (i, response.status))
PY

cat > "$work/read.lua" <<LUA
math.randomseed(42)
request = function()
    return wrk.format("GET", "/tables/bench/b" .. math.random(0, $ROWS - 1))
end
LUA

# Runs wrk and prints "<requests/s> <p99 in ms>".
measure() {
    local target="$1"; shift
    local output
    output="$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency "$@" "$url$target")"
    local rps p99 errors
    rps="$(awk '/Requests\/sec/ {print $2}' <<<"$output")"
    p99="$(awk '$1 == "99%" {print $2}' <<<"$output")"
    errors="$(grep -E 'Non-2xx|Socket errors' <<<"$output" || true)"
    if [[ -n "$errors" ]]; then echo "wrk reported errors for $target: $errors" >&2; exit 1; fi
    # wrk prints latencies as 1.23ms, 456.00us or 1.02s.
    p99="$(python3 -c "import sys,re; v=sys.argv[1]; m=re.match(r'([0-9.]+)(us|ms|s)', v); f={'us':0.001,'ms':1,'s':1000}[m.group(2)]; print('%.2f' % (float(m.group(1))*f))" "$p99")"
    echo "$rps $p99"
}

echo "== wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s, $ROWS rows, $(nproc) cores"
read -r base_rps base_p99 < <(measure "/health")
read -r page_rps page_p99 < <(measure "/tables/bench?%24filter=n%20ge%20100&%24orderby=updatedAt&%24top=50")
read -r plain_rps plain_p99 < <(measure "/tables/bench?%24top=50")
read -r read_rps read_p99 < <(measure "/" -s "$work/read.lua")

printf '%-34s %12s %10s %10s\n' "benchmark" "requests/s" "p99 ms" "vs health"
row() { printf '%-34s %12.0f %10.2f %9.2fx\n' "$1" "$2" "$3" "$(python3 -c "print($2 / $base_rps)")"; }
row "GET /health (baseline)" "$base_rps" "$base_p99"
row "50-row page, filter+order updatedAt" "$page_rps" "$page_p99"
row "50-row page, id order" "$plain_rps" "$plain_p99"
row "read by id (random)" "$read_rps" "$read_p99"
