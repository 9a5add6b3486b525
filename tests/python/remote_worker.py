#!/usr/bin/env python3
"""A remote outbox worker in plain Python (standard library only).

    remote_worker.py BASE_URL TOKEN WORKER_ID KIND RUN_LOG

Claims jobs of KIND over HTTP, "runs" each (appends `<job id> <attempt>` to RUN_LOG), completes it with an
output, and stops once a claim comes back empty three times in a row. The first job it completes it then
tries to complete again, as a worker whose claim went stale would: that must answer 409 and change nothing.
"""

import json
import sys
import time
import urllib.error
import urllib.request

base, token, worker, kind, run_log = sys.argv[1:6]


def call(path, body):
    req = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode(),
        headers={"authorization": "Bearer " + token, "content-type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


empty, first, done = 0, None, 0
with open(run_log, "a") as log:
    while empty < 3:
        status, reply = call("/api/work/claim", {"worker": worker, "kinds": [kind], "limit": 25, "lease": "60s"})
        assert status == 200, (status, reply)
        if not reply["jobs"]:
            empty += 1
            time.sleep(0.1)
            continue
        empty = 0
        for job in reply["jobs"]:
            log.write(f"{job['id']} {job['attempt']}\n")
            log.flush()
            status, reply = call(
                f"/api/work/jobs/{job['id']}/complete",
                {"worker": worker, "run": job["run"], "output": {"by": "python", "n": job["payload"]["n"]}},
            )
            assert status == 200, (status, reply)
            done += 1
            first = first or job

status, reply = call(f"/api/work/jobs/{first['id']}/complete", {"worker": worker, "run": first["run"]})
print(json.dumps({"completed": done, "stale_status": status, "stale_code": reply.get("code")}))
