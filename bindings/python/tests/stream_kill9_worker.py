"""Child of test_stream_kill9.py: listens on one layer over the change stream while the
server's changes stream in, and makes local edits, printing ``E <id>`` after each
create_annotation call returned (so the parent knows which edits the API acknowledged), until
it is killed with SIGKILL.

    stream_kill9_worker.py SERVER_URL STORAGE JWT ITERATION
"""
from __future__ import annotations

import sys
import time

import layersync


def main() -> int:
    url, storage, jwt, iteration = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    client = layersync.Client(url, storage, sync_delay_s=None)  # local edits stay queued
    client.wait_validated(timeout=30)
    doc = client.document_for_jwt(jwt)
    if not doc.is_downloaded:
        doc.download(wait=True, timeout=60)
    doc.start_listening()
    print("R", flush=True)
    n = 0
    while True:
        created = doc.create_annotation({"v": 2, "type": "pspdfkit/note", "pageIndex": 0, "bbox": [1, 1, 5, 5],
                                         "icon": "comment", "text": {"format": "plain", "value": f"local {iteration}-{n}"}})
        print("E", created["id"], flush=True)
        n += 1
        time.sleep(0.02)


if __name__ == "__main__":
    sys.exit(main())
