"""Helper of scenario 3: one process holding idle listeners (one layersync Client, one
document per token, each on its own layer, all listening). Prints "ready N" once every
document is downloaded and listening; exits when its stdin closes.

    python bench/idle_listeners.py URL STORAGE_DIR TOKENS.json
"""
import json
import sys

import common  # noqa: F401  (puts bindings/python on sys.path)
import layersync


def main() -> None:
    url, storage, tokens_file = sys.argv[1:4]
    tokens = json.loads(open(tokens_file).read())
    with layersync.Client(url, storage, allow_insecure_http=True, sync_delay_s=None) as client:
        client.wait_validated(timeout=30)
        docs = []
        for jwt in tokens:
            doc = client.document_for_jwt(jwt)
            doc.download(wait=True, timeout=60)
            doc.start_listening()
            docs.append(doc)
        print(f"ready {len(docs)}", flush=True)
        sys.stdin.read()
        for doc in docs:
            doc.stop_listening()


if __name__ == "__main__":
    main()
