"""CPU cost of collaboration permissions inside one server process (no HTTP, no other
load's noise: ``time.process_time``): a push of N creates through ``changes.push`` with a
token without and with a reviewer's claim, a page built and encoded for a reviewer and a
guest, and the ownership siblings every live record now carries. Complements
``bench/permissions_cost.py`` (the same over loopback, noisy on a shared machine).

    cd server && ../.venv/bin/python ../bench/permissions_cpu.py
"""
import os
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server", "tests"))
from conftest import note  # noqa: E402
from layersync_server.auth import Grant
from layersync_server.permissions import parse_claim, wire_records
from layersync_server.changes import push, SyncRequest, sync_answer
from layersync_server.storage import open_storage, NewDocument
from layersync_server.wire_json import encode_response
import orjson
plain = Grant("d", "", "alice", frozenset({"read-document", "write"}))
claim = Grant("d", "", "alice", frozenset({"read-document", "write"}),
              collaboration=parse_claim(["annotations:view:all", "annotations:edit:self",
                                         "annotations:delete:self", "comments:*:all"]), default_group="review")
guest = Grant("d", "", "guest", frozenset({"read-document"}),
              collaboration=parse_claim(["annotations:view:group=review"]))
st = open_storage(tempfile.mkdtemp() + "/s.sqlite")
st.create_document(NewDocument("d", "D", b"%PDF", "00"*32, 1))
N = 5000
def run(grant, rep):
    layer = f"L{uuid.uuid4().hex[:8]}"
    changes = [{"change_id": f"c{i}", "op": "create", "id": f"r{i:06}", "content": {**note(str(i)), "id": f"r{i:06}"}} for i in range(N)]
    texts = [orjson.dumps(c["content"]).decode() for c in changes]
    req = SyncRequest(None, 0, changes, True, texts, None)
    t0 = time.process_time()
    with st.write_layer("d", layer) as w:
        pushed = push(w, req, grant.user_id, 1000, None, grant)
        state = w.layer
    body = encode_response(sync_answer(state, pushed, grant))
    return time.process_time() - t0, layer
res = {"plain": [], "claim": []}
layers = {}
for rep in range(7):
    for name, g in (("plain", plain), ("claim", claim)) if rep % 2 else (("claim", claim), ("plain", plain)):
        t, layer = run(g, rep); res[name].append(t); layers[name] = layer
a, b = statistics.median(res["plain"]), statistics.median(res["claim"])
print(f"push of {N} creates (CPU): no claim {a*1e3:.1f} ms, claim {b*1e3:.1f} ms, {100*(b-a)/a:+.1f}%, {(b-a)/N*1e6:+.2f} us/record")
recs = list(st.iter_records("d", layers["plain"]))
for name, g in (("reviewer (view:all)", claim), ("guest (view:group=)", guest)):
    tp, tc = [], []
    for _ in range(9):
        t0 = time.process_time(); encode_response({"records": wire_records(None, recs, False)}); tp.append(time.process_time() - t0)
        t0 = time.process_time(); encode_response({"records": wire_records(g, recs, False)}); tc.append(time.process_time() - t0)
    a, b = statistics.median(tp), statistics.median(tc)
    print(f"page of {len(recs)} records built+encoded (CPU), {name}: {a*1e3:.1f} -> {b*1e3:.1f} ms, {(b-a)/len(recs)*1e6:+.2f} us/record")
def old(r): return {"id": r.id, "revision": r.revision, "deleted": r.deleted, "content": r.content}
tp, tn = [], []
for _ in range(9):
    t0 = time.process_time(); encode_response({"records": [old(r) for r in recs]}); tp.append(time.process_time() - t0)
    t0 = time.process_time(); encode_response({"records": [r.to_wire() for r in recs]}); tn.append(time.process_time() - t0)
a, b = statistics.median(tp), statistics.median(tn)
print(f"ownership siblings on the wire (no claim): {a*1e3:.1f} -> {b*1e3:.1f} ms per {len(recs)} records, {(b-a)/len(recs)*1e6:+.2f} us/record")
