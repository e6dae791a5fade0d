"""Helper of scenario 3's row "client listening on 50 layers": one process, one layersync
Client, one document per token (each its own layer). Downloads them all, counts its threads,
starts listening on all, waits until the server closed the idle keep-alive connections of
the downloads (uvicorn: 5 s), then prints one JSON line: threads before and while listening,
TCP connections this process holds to the server (ESTABLISHED, from /proc/self/net/tcp
matched against its own sockets), and the client's listening transport.

    python bench/listen_many.py URL STORAGE_DIR TOKENS.json
"""
import json
import os
import sys
import time
import urllib.parse

import common  # noqa: F401  (puts bindings/python on sys.path)
import layersync


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def established(port: int) -> int:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                    count += 1
    return count


def main() -> None:
    url, storage, tokens_file = sys.argv[1:4]
    tokens = json.loads(open(tokens_file).read())
    port = urllib.parse.urlparse(url).port
    with layersync.Client(url, storage, allow_insecure_http=True, sync_delay_s=None) as client:
        client.wait_validated(timeout=30)
        docs = [client.document_for_jwt(jwt) for jwt in tokens]
        for doc in docs:
            doc.download(wait=True, timeout=60)
        time.sleep(1)
        before = threads()
        for doc in docs:
            doc.start_listening()
        time.sleep(7)  # the server closes idle keep-alive connections after 5 s
        result = {"layers": len(docs), "threads_before": before, "threads_listening": threads(),
                  "connections": established(port), "transport": client.listening_transport}
        for doc in docs:
            doc.stop_listening()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
