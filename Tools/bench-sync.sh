#!/usr/bin/env bash
# The sync benchmark (Tools/SyncBenchmark, a target of the SDK package): initial pull of 100,000 rows from `ferry serve`
# into StoreSQLite beside a download-only baseline, optionally a 1,000,000-row pull for memory, and a
# push of 10,000 queued inserts. Release build; see Tools/README.md.
#
# Usage: Tools/bench-sync.sh [--rows N] [--page N] [--push N] [--memory-rows N]
#        Tools/bench-sync.sh --live N [--idle-seconds S] [--postgres URL]   (live sync: latency, idle cost)
#        Tools/bench-sync.sh --outage N   (the server killed and restarted N times under a syncing device)
#        Tools/bench-sync.sh --compare-clients [--rows N] [--push N]   (push and pull through each HTTP client)
#        Tools/bench-sync.sh --fan-out 1000,10000 [--fan-out-writes N]   (one write reaching N change feeds; Linux)
#        Tools/bench-sync.sh --attachments [--attachment-files N] [--attachment-large-mib N]   (beside curl; Linux)
#        Tools/bench-sync.sh --help
# The server is the Apps package's release `ferry` (--ferry PATH runs another).
set -euo pipefail
cd "$(dirname "$0")/.."
swift build --package-path Apps -c release --product ferry
swift build -c release --product SyncBenchmark
exec .build/release/SyncBenchmark --ferry Apps/.build/release/ferry "$@"
