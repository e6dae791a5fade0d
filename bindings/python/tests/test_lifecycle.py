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
        doc.create_annotation({"type": "pspdfkit/note", "pageIndex": 0, "bbox": [i, i, 24, 24]})
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
