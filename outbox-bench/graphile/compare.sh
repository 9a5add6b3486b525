#!/bin/sh
# outbox's `process` case against graphile-worker with its performance settings, on one PostgreSQL server,
# durable commits, the same number of no-op jobs, medians of 3 runs each, ours and theirs alternating runs,
# with each side's WAL bytes per job over the jobs' whole life (added, then drained) and for the drain alone:
#
#   outbox-bench/graphile/compare.sh <postgres url> [jobs = 20000]
#
# With SHAPES set (e.g. SHAPES="current ready_claimed"), each round also drains those table shapes of
# `outbox-bench/shapes/wal.py` on two psql sessions (the statements alone, no client around them; needs psql),
# and the summary adds each shape's median drain rate, its ratio to graphile-worker and its WAL bytes per job.
#
# OUTBOX_CONCURRENCY (default 500) is the worker's concurrency in our `process` runs, and so the most jobs one
# claim and one completion statement carry: graphile-worker's performance settings fetch 500 jobs at a time into
# their local queue, so both sides write their claims and completions in statements of up to 500 jobs. Set it
# to 100 for the worker's default size.
#
# Needs Node.js and npm (graphile-worker is installed here from the npm registry on first use). CI does not
# run it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
url=${1:?usage: compare.sh <postgres url> [jobs]}
jobs=${2:-20000}
[ -d "$here/node_modules" ] || npm --prefix "$here" ci --no-audit --no-fund
(cd "$here/../.." && cargo build --release -p outbox-bench)
bench="$here/../../target/release/outbox-bench"
ours=""
theirs=""
shapes=""
for run in 1 2 3; do
  if [ -n "${SHAPES:-}" ]; then
    # shellcheck disable=SC2086
    shapes="$shapes
$(python3 "$here/../shapes/wal.py" "$url" "$jobs" 2 $SHAPES | tail -n +2)"
  fi
  theirs="$theirs
$(node "$here/bench.mjs" "$url" "$jobs" 1 2>/dev/null)"
  ours="$ours
$("$bench" --pg-url "$url" --backend postgres --case process --sync full --jobs "$jobs" --runs 1 \
  --concurrency "${OUTBOX_CONCURRENCY:-500}" --json 2>/dev/null)"
done
node --input-type=module -e '
const [ours, theirs] = process.argv.slice(1, 3).map((s) => s.trim().split("\n").map((l) => JSON.parse(l)));
const shapeRuns = {};
for (const line of process.argv[4].trim().split("\n").filter((l) => l.trim())) {
  const [name, , , life, rate] = line.trim().split(/\s+/);
  (shapeRuns[name] ??= []).push({ life: Number(life), rate: Number(rate) });
}
const median = (v) => [...v].sort((a, b) => a - b)[v.length >> 1];
const of = (runs, field) => median(runs.map((r) => r[field]));
const [o, t] = [of(ours, "jobs_per_sec"), of(theirs, "jobs_per_sec")];
const [ow, tw] = [of(ours, "wal_bytes_per_job"), of(theirs, "wal_bytes_per_job")];
console.log(JSON.stringify({ case: "process", backend: "postgres", sync: "on", jobs: Number(process.argv[3]),
  outbox_concurrency: ours[0].concurrency,
  outbox_runs: ours.map((r) => r.jobs_per_sec), graphile_runs: theirs.map((r) => r.jobs_per_sec),
  outbox_jobs_per_sec: o, graphile_jobs_per_sec: t, ratio: Math.round((o / t) * 1000) / 1000,
  outbox_wal_bytes_per_job: ow, graphile_wal_bytes_per_job: tw,
  outbox_wal_bytes_per_job_drain: of(ours, "wal_bytes_per_job_drain"),
  graphile_wal_bytes_per_job_drain: of(theirs, "wal_bytes_per_job_drain"),
  wal_ratio: Math.round((ow / tw) * 1000) / 1000,
  shapes_two_sessions: Object.fromEntries(Object.entries(shapeRuns).map(([name, runs]) => [name, {
    drain_runs: runs.map((r) => r.rate), drain_jobs_per_sec: median(runs.map((r) => r.rate)),
    ratio: Math.round((median(runs.map((r) => r.rate)) / t) * 1000) / 1000,
    wal_bytes_per_job: median(runs.map((r) => r.life)) }])) }));
' "$ours" "$theirs" "$jobs" "$shapes"
