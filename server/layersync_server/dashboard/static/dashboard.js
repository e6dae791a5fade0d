// LayerSync dashboard: a little plain JavaScript, no build step.
// Every piece of HTML it inserts was rendered (and escaped) by the server's templates;
// everything else goes through textContent.
"use strict";

function byRecord(root, id) {
  return root.querySelectorAll('[data-record-id="' + CSS.escape(id) + '"]');
}

// Page sheets keep their shape before the image loads; boxes sit on the annotations.
function layout(root) {
  root.querySelectorAll(".sheet[data-aspect]").forEach(function (sheet) {
    sheet.style.aspectRatio = sheet.dataset.aspect;
  });
  root.querySelectorAll(".box[data-left]").forEach(function (box) {
    box.style.left = box.dataset.left + "%";
    box.style.top = box.dataset.top + "%";
    box.style.width = "max(" + box.dataset.width + "%, 6px)";
    box.style.height = "max(" + box.dataset.height + "%, 6px)";
  });
}

// -- documents: upload by drag and drop or file input; confirm deletes ----------------------

function setupUpload() {
  var form = document.getElementById("upload");
  if (!form) return;
  var status = document.getElementById("upload-status");
  var input = document.getElementById("upload-file");
  function send(file) {
    if (!file) { status.textContent = "Choose a PDF first."; return; }
    var max = Number(form.dataset.maxBytes);
    if (max && file.size > max) { status.textContent = "Too large: the server takes at most " + max + " bytes."; status.className = "status error"; return; }
    var data = new FormData();
    data.append("csrf", form.elements.csrf.value);
    data.append("file", file, file.name);
    status.className = "status";
    status.textContent = "Uploading " + file.name + "…";
    fetch(form.action, { method: "POST", body: data, headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) {
        return response.json().then(function (body) {
          if (!response.ok) throw new Error((body.error && body.error.message) || response.statusText);
          location.href = body.url;
        });
      })
      .catch(function (error) { status.className = "status error"; status.textContent = "Upload failed: " + error.message; });
  }
  form.addEventListener("submit", function (event) { event.preventDefault(); send(input.files[0]); });
  input.addEventListener("change", function () { if (input.files[0]) send(input.files[0]); });
  ["dragenter", "dragover"].forEach(function (name) {
    form.addEventListener(name, function (event) { event.preventDefault(); form.classList.add("over"); });
  });
  form.addEventListener("dragleave", function () { form.classList.remove("over"); });
  form.addEventListener("drop", function (event) {
    event.preventDefault();
    form.classList.remove("over");
    var files = event.dataTransfer && event.dataTransfer.files;
    if (files && files.length) send(files[0]);
  });
}

function setupDeletes() {
  document.querySelectorAll("form.delete").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!confirm("Delete “" + form.dataset.title + "” with all its layers and records?")) event.preventDefault();
    });
  });
}

// -- a layer: select records, live updates ---------------------------------------------------

var selected = null;

function showSelection() {
  document.querySelectorAll(".selected").forEach(function (el) { el.classList.remove("selected"); });
  if (selected) byRecord(document, selected).forEach(function (el) { el.classList.add("selected"); });
}

function select(state, id, scroll) {
  selected = id;
  showSelection();
  var detail = document.getElementById("detail");
  fetch(state.record + encodeURIComponent(id), { credentials: "same-origin" })
    .then(function (response) {
      return response.text().then(function (html) {
        if (selected !== id) return;
        if (!response.ok) { detail.textContent = "This record is gone (deleted)."; return; }
        detail.innerHTML = html;  // a fragment of the server's escaped template
      });
    });
  if (scroll) {
    var box = document.querySelector('.box[data-record-id="' + CSS.escape(id) + '"]');
    if (box) box.scrollIntoView({ block: "nearest", behavior: "smooth" });
  }
}

function refresh(state, changed) {
  // The same page, rendered again by the server; swap its live parts in.
  return fetch(location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
    .then(function (response) {
      if (!response.ok) throw new Error(response.statusText);
      return response.text();
    })
    .then(function (html) {
      var fresh = new DOMParser().parseFromString(html, "text/html");
      ["pages", "layer-head"].forEach(function (id) {
        var now = document.getElementById(id), next = fresh.getElementById(id);
        if (now && next) now.replaceWith(document.adoptNode(next));
      });
      layout(document);
      showSelection();
      changed.forEach(function (c) {
        byRecord(document.getElementById("pages"), c.id).forEach(function (el) { el.classList.add("changed"); });
      });
      if (selected && changed.some(function (c) { return c.id === selected; })) select(state, selected, false);
    });
}

function live(state) {
  var since = state.revision;
  var failures = 0;
  function poll() {
    var url = state.changes + "?since=" + since + "&wait=20";
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) throw new Error(response.statusText);
        return response.json();
      })
      .then(function (body) {
        failures = 0;
        var indicator = document.getElementById("live");
        if (indicator) indicator.classList.remove("off");
        if (body.epoch !== state.epoch || body.has_more || body.revision < since) { location.reload(); return; }
        var clients = document.getElementById("clients");
        if (clients) clients.textContent = String(body.clients);
        if (body.revision > since) {
          since = body.revision;
          return refresh(state, body.changed);
        }
      })
      .then(function () { setTimeout(poll, 0); })
      .catch(function () {
        failures += 1;
        var indicator = document.getElementById("live");
        if (indicator) indicator.classList.add("off");
        setTimeout(poll, Math.min(10000, 500 * failures));
      });
  }
  poll();
}

function setupLayer() {
  var script = document.getElementById("layer-state");
  if (!script) return;
  var state = JSON.parse(script.textContent);
  window.layersyncDashboard = state;
  layout(document);
  document.addEventListener("click", function (event) {
    var target = event.target.closest("[data-record-id]");
    if (target && target.closest("#pages")) select(state, target.dataset.recordId, target.tagName === "TR");
  });
  document.addEventListener("keydown", function (event) {
    var target = event.target.closest && event.target.closest("tr[data-record-id]");
    if (target && event.key === "Enter") select(state, target.dataset.recordId, true);
  });
  live(state);
}

// -- operations: refresh every few seconds ---------------------------------------------------

function setupOperations() {
  var box = document.getElementById("operations");
  if (!box) return;
  setInterval(function () {
    fetch(location.href, { credentials: "same-origin" })
      .then(function (response) { return response.text(); })
      .then(function (html) {
        var next = new DOMParser().parseFromString(html, "text/html").getElementById("operations");
        var now = document.getElementById("operations");
        if (next && now) now.replaceWith(document.adoptNode(next));
      })
      .catch(function () {});
  }, 1000 * Number(box.dataset.refreshS || 5));
}

document.addEventListener("DOMContentLoaded", function () {
  setupUpload();
  setupDeletes();
  setupLayer();
  setupOperations();
});
