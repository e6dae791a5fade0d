import uuid
from conftest import CORPUS

def test_probe(server):
    doc = "ffv-" + uuid.uuid4().hex
    assert server.upload((CORPUS / "pdfjs-prefilled_f1040.pdf").read_bytes(), doc).status_code == 200
    exported = server.http.get(f"/api/documents/{doc}/document.json", headers=server.admin()).json()
    name = next(w["formFieldName"] for w in exported["annotations"] if w.get("formFieldType") == "text")
    deep = "x"
    for _ in range(100):
        deep = [deep]
    for value in [5, {"a": 1}, [1, 2], deep, True]:
        r = server.http.post(f"/api/documents/{doc}/apply_instant_json", headers=server.admin(),
                             json={"formFieldValues": [{"v": 1, "type": "pspdfkit/form-field-value", "name": name, "value": value}]})
        print("apply", str(value)[:20], r.status_code, r.text[:150])
        p = server.http.get(f"/api/documents/{doc}/pdf", headers=server.admin())
        print("   pdf", p.status_code, p.text[:100] if p.status_code != 200 else "")
        rec = server.http.get(f"/sync/v1/documents/{doc}/layers/~/records", headers=server.auth(doc))
        print("   records", rec.status_code, rec.text[:100] if rec.status_code != 200 else "")
