import re, uuid
from conftest import change, note
from layersync_server.app import create_app

def test_probe(server):
    doc = server.new_document()
    layer = "p-" + uuid.uuid4().hex[:6]
    r = server.sync(doc, [change("create", "n1", note("x"))], layer=layer)
    assert r.status_code == 200
    copy = layer + "-copy"
    assert server.http.delete(f"/api/documents/{doc}/layers/{layer}", headers=server.admin()).status_code == 200
    routes = server.http.get("/openapi.json").json()["paths"]
    out = []
    for path, ops in routes.items():
        if "{layer}" not in path and "layer" not in path:
            continue
        for method in ops:
            url = (path.replace("{document_id}", doc).replace("{id}", doc).replace("{layer}", layer)
                   .replace("{annotation_id}", "n1").replace("{record_id}", "n1"))
            url = re.sub(r"\{[^}]+\}", "n1", url)
            headers = server.admin() if url.startswith("/api") else server.auth(doc, layer)
            body = {"base_revision": 1} if method != "get" else None
            if "annotations" in url and method in ("post", "put"):
                body = note("y")
            if url.endswith("instant-json") or "instant" in url:
                body = {"annotations": [{**note("z"), "id": "z1"}]}
            resp = server.http.request(method.upper(), url, json=body, headers=headers,
                                       params={"since": 0, "wait": 0} if "changes" in url else None)
            names = [e["name"] for e in server.http.get(f"/api/documents/{doc}/layers", headers=server.admin()).json()["data"]]
            out.append(f"{method.upper()} {path} -> {resp.status_code} {resp.text[:80]!r} back={layer in names}")
    # create from a deleted source
    resp = server.http.post(f"/api/documents/{doc}/layers", json={"name": copy, "source_layer_name": layer}, headers=server.admin())
    out.append(f"create from deleted source -> {resp.status_code} {resp.text[:120]}")
    # dashboard
    open("/tmp/b19/routes.txt", "w").write("\n".join(out))
