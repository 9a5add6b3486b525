#!/usr/bin/env bash
# A worker in shell: claims jobs of one kind and runs a command for each, the payload on its stdin. What the
# command prints (JSON, or nothing) is the job's output; a non-zero exit fails the attempt, retried after a
# backoff while attempts are left. Run as many as you like, on any machine that reaches the database.
#
#   OUTBOX_DATABASE_URL=sqlite://app.db shell-worker.sh resize ./resize.py
#
# Needs `outbox` and `jq` on the PATH. OUTBOX_LEASE (60s) is how long a claim holds without a heartbeat,
# OUTBOX_HEARTBEAT (20s) how often a running job renews it.
set -uo pipefail
kind=$1; shift
lease=${OUTBOX_LEASE:-60s} beat=${OUTBOX_HEARTBEAT:-20s}
export OUTBOX_WORKER="$kind-${HOSTNAME:-host}-$$"   # the claims' owner: every later call names it
while true; do
  job=$(outbox claim --kind "$kind" --lease "$lease" --wait 30s) || exit 1  # bad options or no database
  [[ -n $job ]] || continue                                               # nothing for 30 s: ask again
  id=$(jq -r .id <<<"$job") attempt=$(jq -r .attempt <<<"$job")
  # The heartbeat renews the lease while the command runs, and stops if this shell dies: the job is then
  # rescued once its lease runs out, and runs again on another worker.
  (while sleep "$beat" && kill -0 $$ 2>/dev/null; do
     outbox extend "$id" --attempt "$attempt" --by "$lease" >/dev/null || break
   done) &
  heartbeat=$!
  if output=$(jq -c .payload <<<"$job" | "$@"); then
    outbox complete "$id" --attempt "$attempt" --output "${output:-null}" >/dev/null
  else
    outbox fail "$id" --attempt "$attempt" --reason "$1 exited with status $?" >/dev/null
  fi  # exit 6 if the claim ran out and the job went to another worker: nothing was written, move on
  kill "$heartbeat" 2>/dev/null
done
