#!/usr/bin/env bash
# The reference server on SQLite and on PostgreSQL, in one run, with one and with two instances.
#
# For each backend (a SQLite file in WAL mode; a fresh schema of a PostgreSQL database) it starts two
# release `ferry serve` processes on the same database, seeds $ROWS rows through the first, then
# measures with wrk, first against instance 1 alone, then against both at once (two wrk processes,
# one per instance, started together: an even round-robin split, added up):
#   - page:   GET /tables/bench?$filter=n ge 100&$orderby=updatedAt&$top=50   (50 rows)
#   - read:   GET /tables/bench/b<random>
#   - insert: POST /tables/bench, a new row each time: commit-ordered inserts into ONE table
# and prints requests/s, p99 latency, and PostgreSQL's ratio to SQLite for each line.
#
# Usage: Tools/bench-backends.sh [duration-seconds]   (default 5)
# Environment: ROWS (default 10000), THREADS (2), CONNECTIONS (16 per wrk), FERRY (the binary; a
# release build is made when missing), FERRY_BENCH_POSTGRES_URL (default: $FERRY_TEST_POSTGRES_URL,
# else the server Tools/postgres starts). Needs wrk, python3 and psql (apt-get install -y wrk).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

DURATION="${1:-5}"
ROWS="${ROWS:-10000}"
THREADS="${THREADS:-2}"
CONNECTIONS="${CONNECTIONS:-16}"
FERRY="${FERRY:-$root/Apps/.build/release/ferry}"

command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install -y wrk)" >&2; exit 1; }
command -v psql >/dev/null || { echo "psql is not installed (apt-get install -y postgresql-client)" >&2; exit 1; }
if [[ ! -x "$FERRY" ]]; then
    echo "== building the release ferry binary"
    swift build --package-path Apps -c release --product ferry
fi
postgres="${FERRY_BENCH_POSTGRES_URL:-${FERRY_TEST_POSTGRES_URL:-}}"
[[ -n "$postgres" ]] || postgres="$(bash Tools/postgres)"
schema="ferry_bench_$$"

work="$(mktemp -d)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    psql -q "$postgres" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

cat > "$work/tables.json" <<'JSON'
{ "dynamicTables": false, "tables": { "bench": { "pageSize": 50, "maxTop": 1000 } } }
JSON

# Starts one instance on database $1 and sets $started to its URL (not in a subshell: the pid is
# kept for the cleanup).
start() {
    local out="$work/out.$RANDOM"
    FERRY_DATABASE_URL="$1" "$FERRY" serve --port 0 --tables "$work/tables.json" --log-level error \
        > "$out" 2> "$out.err" &
    pids+=($!)
    for _ in $(seq 1 100); do
        grep -q "listening on" "$out" 2>/dev/null && break
        sleep 0.1
    done
    local url
    url="$(grep -o 'http://[0-9.:]*' "$out" | head -1)"
    [[ -n "$url" ]] || { echo "the server did not start:" >&2; cat "$out.err" >&2; exit 1; }
    started="$url"
}

stop_all() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    pids=()
}

seed() {
    python3 - "$1" "$ROWS" <<'PY'
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
}

cat > "$work/read.lua" <<LUA
math.randomseed(os.time())
request = function()
    return wrk.format("GET", "/tables/bench/b" .. math.random(0, $ROWS - 1))
end
LUA

# Each wrk thread numbers its own inserts; the prefix keeps runs, processes and threads apart.
cat > "$work/insert.lua" <<'LUA'
local counter = 0
prefix = "w"  -- a global: setup() replaces it in each thread
function setup(thread)
    thread:set("prefix", (os.getenv("BENCH_PREFIX") or "w") .. "-" .. tostring(math.random(1, 1e9)))
end
request = function()
    counter = counter + 1
    local body = '{"id":"' .. prefix .. "-" .. counter .. '","n":' .. counter .. ',"title":"new"}'
    return wrk.format("POST", "/tables/bench", {["Content-Type"] = "application/json"}, body)
end
LUA

# Runs wrk on each URL given after "--" at once; prints "<total requests/s> <worst p99 in ms>".
measure() {
    local target="$1"; shift
    local options=()
    while [[ $1 != "--" ]]; do options+=("$1"); shift; done
    shift
    local index=0 files=()
    for url in "$@"; do
        index=$((index + 1))
        BENCH_PREFIX="$RANDOM$index" wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency "${options[@]}" \
            "$url$target" > "$work/wrk.$index" &
        files+=("$work/wrk.$index")
    done
    wait  # measure runs in a subshell: its only children are these wrk processes
    python3 - "${files[@]}" <<'PY'
import re, sys
total, worst = 0.0, 0.0
for name in sys.argv[1:]:
    text = open(name).read()
    if "Non-2xx" in text or "Socket errors" in text:
        sys.exit("wrk reported errors:\n" + text)
    total += float(re.search(r"Requests/sec:\s+([0-9.]+)", text).group(1))
    value, unit = re.search(r"\s99%\s+([0-9.]+)(us|ms|s)", text).groups()
    worst = max(worst, float(value) * {"us": 0.001, "ms": 1, "s": 1000}[unit])
print("%.0f %.2f" % (total, worst))
PY
}

declare -A results
for backend in sqlite postgresql; do
    if [[ $backend == sqlite ]]; then
        database="sqlite:$work/bench.sqlite"
    else
        separator='?'
        [[ $postgres != *\?* ]] || separator='&'
        database="$postgres${separator}schema=$schema"
    fi
    start "$database"
    first="$started"
    start "$database"
    second="$started"
    echo "== $backend: instances $first and $second, seeding $ROWS rows"
    seed "$first"
    for instances in 1 2; do
        urls=("$first")
        [[ $instances == 2 ]] && urls+=("$second")
        results[$backend,$instances,page]="$(measure "/tables/bench?%24filter=n%20ge%20100&%24orderby=updatedAt&%24top=50" -- "${urls[@]}")"
        results[$backend,$instances,read]="$(measure "/" -s "$work/read.lua" -- "${urls[@]}")"
        results[$backend,$instances,insert]="$(measure "/tables/bench" -s "$work/insert.lua" -- "${urls[@]}")"
    done
    stop_all
done

echo "== wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s per instance, $ROWS rows, $(nproc) cores"
printf '%-30s %12s %9s %12s %9s %9s\n' "benchmark" "SQLite r/s" "p99 ms" "PG r/s" "p99 ms" "PG/SQLite"
for instances in 1 2; do
    for kind in page read insert; do
        read -r s_rps s_p99 <<<"${results[sqlite,$instances,$kind]}"
        read -r p_rps p_p99 <<<"${results[postgresql,$instances,$kind]}"
        label="$kind, $instances instance"
        [[ $instances == 1 ]] || label+="s"
        printf '%-30s %12.0f %9.2f %12.0f %9.2f %8.2fx\n' "$label" "$s_rps" "$s_p99" "$p_rps" "$p_p99" \
            "$(python3 -c "print($p_rps / $s_rps)")"
    done
done
