"""Helper of scenario 3's row "client listening on 50 layers": one process, one layersync
Client, one document per token (each its own layer). Downloads them all, counts its threads,
starts listening on all, waits until the server closed the idle keep-alive connections of
the downloads (uvicorn: 5 s), then prints one JSON line: threads before and while listening,
TCP connections this process holds to the server (ESTABLISHED, from /proc/self/net/tcp
matched against its own sockets), and the client's listening transport.

    python bench/listen_many.py URL STORAGE_DIR TOKENS.json
"""
import json
import sys
import time
import urllib.parse

import common  # noqa: F401  (puts bindings/python on sys.path)
import layersync

sys.path.insert(0, str(common.REPO / "bindings" / "python" / "tests"))
from procstat import established_connections as established, threads  # noqa: E402


def main() -> None:
    url, storage, tokens_file = sys.argv[1:4]
    tokens = json.loads(open(tokens_file).read())
    port = urllib.parse.urlparse(url).port
    with layersync.Client(url, storage, allow_insecure_http=True, sync_delay_s=None) as client:
        client.wait_validated(timeout=30)
        docs = [client.document_for_jwt(jwt) for jwt in tokens]
        for doc in docs:
            doc.download(wait=True, timeout=60)
        # libdispatch lets idle worker threads (the downloads') exit after a few seconds:
        # settle as long as while listening, so both counts see the same pool.
        time.sleep(7)
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
