"""Context managers, interpreter exit with callbacks in flight, and the asyncio adapter."""
from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import threading

import pytest

import layersync
import layersync.aio

from conftest import WAIT_S
from test_client import note


def test_document_context_manager_stops_network_work(downloaded, server):
    client, doc = downloaded()
    with doc as same:
        assert same is doc
        doc.start_listening()
    created = doc.create_annotation(note("after with"))  # the handle stays usable
    doc.sync(wait=True, timeout=WAIT_S)
    assert created["id"] in server.annotations(doc.id)
    client.close()
    doc.close()  # no-op once the client is closed


EXIT_SCRIPT = textwrap.dedent('''
    import sys, time, layersync
    url, storage, jwt, mode = sys.argv[1:5]
    client = layersync.Client(url, storage, sync_delay_s=0.01)
    client.wait_validated(timeout=30)
    doc = client.document_for_jwt(jwt)
    doc.download(wait=True, timeout=30)
    def slow(d, *args):
        time.sleep(0.05)
        if mode == "raise":
            raise RuntimeError("handler raised while the interpreter exits")
    for name in ("did_begin_sync", "did_change_sync_state", "did_finish_sync", "did_receive_changes"):
        client.on(name, slow)
    doc.start_listening()
    for i in range(15):
        doc.create_annotation({"type": "pspdfkit/note", "pageIndex": 0, "bbox": [i, i, 24, 24],
                               "text": {"format": "plain", "value": ""}, "icon": "comment"})
    doc.sync(wait=False)
    print("exiting with callbacks in flight", flush=True)
    if mode == "exit":
        sys.exit(0)
''')


@pytest.mark.parametrize("mode", ["fall-off", "exit", "raise"])
def test_interpreter_exit_with_callbacks_in_flight(server, uploaded, tmp_path, mode):
    jwt = server.mint_token(uploaded(), user_id="exit")
    proc = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, server.url, str(tmp_path / "s"), jwt, mode],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "exiting with callbacks in flight" in proc.stdout
    assert "Fatal Python error" not in proc.stderr and "Segmentation" not in proc.stderr


def test_asyncio_adapter(make_client, server, uploaded):
    doc_id = uploaded()

    async def main() -> None:
        loop_thread = threading.get_ident()
        a_client, b_client = make_client(), make_client()
        info = await layersync.aio.wait_validated(a_client, timeout=WAIT_S)
        assert "protocol" in info
        a = a_client.document_for_jwt(server.mint_token(doc_id, user_id="alice"))
        b = b_client.document_for_jwt(server.mint_token(doc_id, user_id="bob"))
        threads: set[int] = set()
        await layersync.aio.download(a, timeout=WAIT_S, progress=lambda done, total: threads.add(threading.get_ident()))
        assert threads == {loop_thread}  # progress runs on the loop
        await layersync.aio.download(b, timeout=WAIT_S)

        async with layersync.aio.events(b_client, "did_receive_changes", document=b) as stream:
            b.start_listening()
            created = a.create_annotation(note("async 🐍"))
            await layersync.aio.sync(a, timeout=WAIT_S)
            while True:
                event = await stream.get(timeout=WAIT_S)
                assert event.name == "did_receive_changes" and event.document is b
                if created["id"] in event.args[0].get("created", []) + event.args[0].get("updated", []):
                    break
        assert b.get_annotation(created["id"])["text"]["value"] == "async 🐍"

        class Boom(Exception):
            pass

        def bad(doc: layersync.Document) -> None:
            raise Boom("from a handler")
        remove = a_client.on("did_finish_sync", bad)
        a.create_annotation(note("x"))
        with pytest.raises(Boom):
            await layersync.aio.sync(a, timeout=WAIT_S)
        remove()

        with pytest.raises(TimeoutError):
            await layersync.aio.wait_for(a_client, "did_fail_download", timeout=0.05)

    asyncio.run(main())


CLOSE_RACE_SCRIPT = textwrap.dedent('''
    import sys, threading, time, layersync
    url, storage, jwt, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    refused = 0
    for r in range(rounds):
        client = layersync.Client(url, f"{storage}/{r}", sync_delay_s=0.01)
        client.wait_validated(timeout=30)
        doc = client.document_for_jwt(jwt)
        doc.download(wait=True, timeout=30)
        doc.start_listening()  # so that destroy has network work to cancel and takes a while
        stop = threading.Event()
        def hammer(i):
            global refused
            n = 0
            while not stop.is_set():
                try:
                    a = doc.create_annotation({"type": "pspdfkit/note", "pageIndex": 0, "bbox": [i, n, 1, 1],
                                               "text": {"format": "plain", "value": ""}, "icon": "comment"})
                    doc.list_annotations(limit=5)
                    doc.state; doc.has_unsynced_changes
                    doc.update_annotation({**a, "bbox": [n, i, 2, 2]})
                    doc.sync(wait=False)
                except layersync.InvalidStateError:
                    refused += 1
                    return
                n += 1
        threads = [threading.Thread(target=hammer, args=(i,)) for i in range(4)]
        for t in threads: t.start()
        time.sleep(0.3)
        client.close()   # while the four threads are inside C calls
        stop.set()
        for t in threads: t.join()
    print("refused", refused, flush=True)
''')


def test_close_while_other_threads_call_in_never_crashes(server, uploaded, tmp_path):
    """Regression: close() raced a thread between its closed-check and its C call, which
    then ran on a freed handle (SIGSEGV about one run in five). Calls after close must get
    InvalidStateError instead."""
    jwt = server.mint_token(uploaded(), user_id="race")
    proc = subprocess.run([sys.executable, "-c", CLOSE_RACE_SCRIPT, server.url, str(tmp_path / "s"), jwt, "10"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    refused = int(proc.stdout.split("refused")[1])
    assert refused == 10 * 4  # every hammering thread saw the close as InvalidStateError
