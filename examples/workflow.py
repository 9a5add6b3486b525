#!/usr/bin/env python3
"""A workflow created by a program without the Rust types: documents written, extracted by Claude and published to
S3, then an index written once every document is out. The same workflow goes in over the HTTP API or through the
`outbox` command; either way every step is checked first, and the whole workflow is written or nothing.

    python3 examples/workflow.py http http://127.0.0.1:8080   # OUTBOX_TOKEN for a server with tokens
    python3 examples/workflow.py cli                           # `outbox` on the PATH, OUTBOX_DATABASE_URL set

Prints the workflow's id and each step's job id as JSON. Standard library only.
"""

import hashlib
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

DOCUMENTS = {
    "contract-7": "The supplier delivers 40 units by 1 March.\n",
    "contract-8": "Payment is due 30 days after delivery.\n",
    "contract-9": "Either party may end the contract with 90 days' notice.\n",
}
BUCKET = os.environ.get("OUTBOX_EXAMPLE_BUCKET", "extractions")


def workflow():
    """Per document: write it, extract from it, publish it; then the index, after every publication."""
    steps = []
    for name, text in DOCUMENTS.items():
        prompt = f"List the obligations in docs/{name}.txt as JSON."
        steps += [
            {"name": f"write-{name}", "kind": "create_file",
             "payload": {"path": f"docs/{name}.txt", "content": text}},
            {"name": f"extract-{name}", "kind": "claude_extraction", "after": [f"write-{name}"],
             "payload": {"prompt": prompt, "targetPath": f"extracted/{name}.json", "requirementId": name,
                         "promptHash": hashlib.sha256(prompt.encode()).hexdigest()}},
            {"name": f"publish-{name}", "kind": "sync_aws", "after": [f"extract-{name}"],
             "payload": {"resourceType": "s3_object", "resourceId": f"{BUCKET}/docs/{name}.txt",
                         "config": {"body": text, "contentType": "text/plain"}}},
        ]
    index = "".join(f"{name}\n" for name in DOCUMENTS)
    steps.append({"name": "index", "kind": "create_file", "on_parent_failure": "run",
                  "after": [f"publish-{name}" for name in DOCUMENTS],
                  "payload": {"path": "docs/index.txt", "content": index, "overwrite": True}})
    return {"name": "publish contracts", "steps": steps}


def over_http(base):
    request = urllib.request.Request(f"{base.rstrip('/')}/api/workflows", data=json.dumps(workflow()).encode(),
                                     headers={"content-type": "application/json"}, method="POST")
    if os.environ.get("OUTBOX_TOKEN"):
        request.add_header("authorization", f"Bearer {os.environ['OUTBOX_TOKEN']}")
    try:
        with urllib.request.urlopen(request) as answer:
            return json.load(answer)
    except urllib.error.HTTPError as refused:
        # The body says what is wrong: the field, or every problem of the workflow.
        sys.exit(f"refused ({refused.code}): {json.load(refused)['message']}")


def through_cli():
    done = subprocess.run(["outbox", "workflow", "create", "-", "--format", "json"], input=json.dumps(workflow()),
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(done.stderr.strip())
    return json.loads(done.stdout)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "http" and len(sys.argv) == 3:
        created = over_http(sys.argv[2])
    elif sys.argv[1:] == ["cli"]:
        created = through_cli()
    else:
        sys.exit(__doc__)
    print(json.dumps(created, indent=2, sort_keys=True))
