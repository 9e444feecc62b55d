#!/usr/bin/env bash
# Compressed answers: the same pull from `ferry serve` and from `ferry serve --compress`, on one
# SQLite file, in alternating rounds; the best wall time of each, the server's CPU, and the bytes of
# one page as sent (curl with and without --compressed), with the compressed run's ratio to the plain
# one. Release build; loopback, so the time shows the cost and the bytes what a network would gain.
#
# Usage: Tools/bench-compression.sh [--rows N] [--rounds N]
set -euo pipefail
cd "$(dirname "$0")/.."
rows=50000
rounds=3
while [ $# -gt 0 ]; do
    case "$1" in
        --rows) rows="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        *) echo "usage: $0 [--rows N] [--rounds N]" >&2; exit 64 ;;
    esac
done
command -v curl > /dev/null || { echo "bench-compression: needs curl" >&2; exit 1; }
swift build --package-path Apps -c release --product ferry > /dev/null
ferry="$PWD/Apps/.build/release/ferry"
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# A port the kernel picks, as `ferry serve --port 0` prints it.
start() { # NAME ARGS… ; sets $url and appends the pid
    local log="$work/$1.log"
    shift
    "$ferry" serve --db "sqlite:$work/server.sqlite" --port 0 "$@" > "$log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 100); do
        url=$(grep -o 'http://127.0.0.1:[0-9]*' "$log" | head -1 || true)
        [ -n "$url" ] && return 0
        sleep 0.1
    done
    echo "bench-compression: the server did not start: $(cat "$log")" >&2
    exit 1
}

echo "seeding $rows items of about 150 bytes…"
python3 - "$rows" > "$work/rows.jsonl" << 'PY'
import json, sys
for i in range(int(sys.argv[1])):
    print(json.dumps({"id": f"row-{i:07d}", "title": f"Buy item number {i} at the corner shop",
                      "done": i % 3 == 0, "priority": i % 5, "note": "remember the list"}))
PY
"$ferry" import todo "$work/rows.jsonl" --store "$work/seed.sqlite" > /dev/null
start seed
"$ferry" push --store "$work/seed.sqlite" --server "$url" > /dev/null
kill "${pids[0]}"
wait "${pids[0]}" 2> /dev/null || true
pids=()

start plain
plain_url=$url
plain_pid=${pids[-1]}
start compressing --compress
compressed_url=$url
compressed_pid=${pids[-1]}

cpu() { awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$1/stat"; }
best() { sort -n | head -1; }
pull() { # URL → seconds
    rm -f "$work"/pulled.sqlite*
    local start end
    start=$(date +%s.%N)
    "$ferry" pull todo --store "$work/pulled.sqlite" --server "$1" --page-size 100 --query-id all > /dev/null
    end=$(date +%s.%N)
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }'
}
plain_times=()
compressed_times=()
plain_cpu0=$(cpu "$plain_pid")
compressed_cpu0=$(cpu "$compressed_pid")
for _ in $(seq 1 "$rounds"); do
    plain_times+=("$(pull "$plain_url")")
    compressed_times+=("$(pull "$compressed_url")")
done
calc() { awk "BEGIN { printf \"%.3f\", $1 }"; }
plain_cpu=$(calc "$(cpu "$plain_pid") - $plain_cpu0")
compressed_cpu=$(calc "$(cpu "$compressed_pid") - $compressed_cpu0")
plain_best=$(printf '%s\n' "${plain_times[@]}" | best)
compressed_best=$(printf '%s\n' "${compressed_times[@]}" | best)
page_plain=$(curl -s -o /dev/null -w '%{size_download}' "$compressed_url/tables/todo?%24top=100")
page_compressed=$(curl -s --compressed -o /dev/null -w '%{size_download}' "$compressed_url/tables/todo?%24top=100")

printf '\npull of %d items in pages of 100, best of %d rounds (release, loopback)\n' "$rows" "$rounds"
printf '  plain          %6.2f s   server CPU %5.2f s for %d pulls\n' "$plain_best" "$plain_cpu" "$rounds"
printf '  --compress     %6.2f s   server CPU %5.2f s for %d pulls\n' "$compressed_best" "$compressed_cpu" "$rounds"
printf '  a page         %6d bytes plain, %d compressed\n' "$page_plain" "$page_compressed"
printf '  --compress / plain: time %.2fx, server CPU %.2fx, bytes %.3fx\n' \
    "$(calc "$compressed_best / $plain_best")" "$(calc "$compressed_cpu / $plain_cpu")" \
    "$(calc "$page_compressed / $page_plain")"
