#!/usr/bin/env bash
# A worker in shell: claims jobs of one kind and runs a command for each, the payload on its stdin. What the
# command prints (JSON, or nothing) is the job's output; a non-zero exit fails the attempt, retried after a
# backoff while attempts are left. Run as many as you like, on any machine that reaches the database.
#
#   OUTBOX_DATABASE_URL=sqlite://app.db shell-worker.sh resize ./resize.py
#
# Needs bash, `outbox` and `jq` on the PATH. OUTBOX_LEASE (60s) is how long a claim holds
# without a heartbeat, OUTBOX_HEARTBEAT (20, in seconds) how often a running job renews it.
set -uo pipefail
kind=$1; shift
lease=${OUTBOX_LEASE:-60s} beat=${OUTBOX_HEARTBEAT:-20}
export OUTBOX_WORKER="$kind-${HOSTNAME:-host}-$$"   # the claims' owner: every later call names it
while true; do
  job=$(outbox claim --kind "$kind" --lease "$lease" --wait 30s)
  case $? in
    0) ;;
    2) exit 2 ;;                    # a bad option or kind: said once on stderr, not in a loop
    *) sleep 1; continue ;;         # the database is unreachable or busy: try again
  esac
  [[ -n $job ]] || continue         # nothing for 30 s: ask again
  id=$(jq -r .id <<<"$job") run=$(jq -r .run <<<"$job") payload=$(jq -c .payload <<<"$job")
  # The heartbeat renews the lease while the command runs, and stops when the job ends or this shell is gone
  # (the heartbeat is then adopted by another parent): a dead shell's job is rescued once its lease runs out,
  # and runs again on another worker.
  (trap 'kill ${nap:-} 2>/dev/null; exit' TERM
   while sleep "$beat" & nap=$!; wait $nap; do
     stat=$(</proc/$BASHPID/stat) && set -- ${stat##*) } && (( $2 != $$ )) && exit
     outbox extend "$id" --run "$run" --by "$lease" >/dev/null
     (( $? != 6 )) || exit                                  # the claim is gone: stop
   done) &
  heartbeat=$!
  if output=$("$@" <<<"$payload"); then status=0; else status=$?; fi
  kill $heartbeat
  if (( status == 0 )); then
    outbox complete "$id" --run "$run" --output - <<<"${output:-null}" >/dev/null
  else
    outbox fail "$id" --run "$run" --reason "$1 exited with status $status" >/dev/null
  fi  # exit 6 if the claim ran out and the job went to another worker: nothing was written, move on
done
