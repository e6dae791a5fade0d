-- Drives liblayersync from LuaJIT's FFI, reading the same generated include/layersync.h
-- that C programs include: the "embed it in another runtime" promise, tested by CTest
-- (examples.lua, against the real server).
--
--   luajit layersync_example.lua HEADER LIBRARY SERVER_URL STORAGE_DIR JWT
--
-- Downloads the document, adds an annotation, lists the annotations, syncs, and prints
-- what it did. LuaJIT must not be entered from a foreign thread, and the library runs
-- callbacks on its own thread (docs/threading.md), so this program passes NO delegate and
-- polls the document state instead; that is the pattern for any runtime whose callbacks
-- are bound to one thread.
local ffi = require("ffi")
io.stdout:setvbuf("line")

local header_path, library_path, server_url, storage, jwt = unpack(arg)
assert(jwt, "usage: luajit layersync_example.lua HEADER LIBRARY SERVER_URL STORAGE_DIR JWT")

-- The header minus what ffi.cdef cannot read: comments, preprocessor lines and the
-- `extern "C"` block of C++; `#define NAME number` lines become constants.
local function load_header(path)
  local text = assert(io.open(path)):read("*a")
  text = text:gsub("/%*.-%*/", "")
  local constants, decls, skip = {}, {}, 0
  for line in text:gmatch("[^\n]*") do
    local name, value = line:match("^#define%s+([%w_]+)%s+%(?([%-%d%.]+)%)?%s*$")
    if name then constants[name] = tonumber(value) end
    if line:match("^#ifdef%s+__cplusplus") then skip = 1
    elseif skip == 1 and line:match("^#endif") then skip = 0
    elseif skip == 0 and not line:match("^%s*#") then decls[#decls + 1] = line end
  end
  ffi.cdef(table.concat(decls, "\n"))
  return constants
end

local C = load_header(header_path)
local ls = ffi.load(library_path)
assert(ls.layersync_abi_version() == C.LAYERSYNC_ABI_VERSION, "ABI version mismatch")
print("layersync " .. ffi.string(ls.layersync_version()) .. " from LuaJIT")

local err = ffi.new("layersync_error[1]")
err[0].version = C.LAYERSYNC_ERROR_VERSION
local function check(rc, what)
  if rc ~= 0 then
    local message = err[0].message ~= nil and ffi.string(err[0].message) or ""
    ls.layersync_error_clear(err)
    error(what .. ": " .. ffi.string(ls.layersync_error_code_name(rc)) .. ": " .. message, 2)
  end
end
-- Takes a string the library handed out and frees it with layersync_free.
local function take(out)
  local s = ffi.string(out[0])
  ls.layersync_free(out[0])
  return s
end
ffi.cdef("int poll(void *fds, unsigned long nfds, int timeout);")
local function wait_until(what, timeout_s, predicate)
  for _ = 1, timeout_s * 20 do
    if predicate() then return end
    ffi.C.poll(nil, 0, 50)
  end
  error("timed out waiting for " .. what)
end

local options = ffi.new("layersync_client_options[1]")
check(ls.layersync_client_options_init(options, C.LAYERSYNC_CLIENT_OPTIONS_VERSION), "options")
options[0].server_url = server_url
options[0].storage_path = storage
options[0].sync_delay_s = C.LAYERSYNC_SYNC_DISABLED
local client = ffi.new("layersync_client *[1]")
check(ls.layersync_client_create(options, nil, client, err), "client_create")
local document = ffi.new("layersync_document *[1]")
check(ls.layersync_client_document_for_jwt(client[0], jwt, document, err), "document_for_jwt")
local doc = document[0]

check(ls.layersync_document_download(doc, err), "download")
wait_until("the download", 60, function() return ls.layersync_document_is_downloaded(doc) end)
local path = ffi.new("char *[1]")
check(ls.layersync_document_pdf_path(doc, path, err), "pdf_path")
print("downloaded " .. ffi.string(ls.layersync_document_id(doc)) .. " to " .. take(path))

local out = ffi.new("char *[1]")
local note = '{"v":2,"type":"pspdfkit/note","pageIndex":0,"bbox":[10,10,20,20],"icon":"comment",' ..
             '"createdAt":"2025-01-01T00:00:00Z","updatedAt":"2025-01-01T00:00:00Z",' ..
             '"text":{"format":"plain","value":"from LuaJIT"}}'
check(ls.layersync_document_create_annotation(doc, note, out, err), "create_annotation")
local id = take(out):match('"id"%s*:%s*"([^"]+)"')
print("added " .. id)

check(ls.layersync_document_list_annotations(doc, nil, out, err), "list_annotations")
local listed = take(out)
local count = select(2, listed:gsub('"id"%s*:', ""))
print("annotations: " .. count)
assert(listed:find(id, 1, true), "the new annotation is not listed")

check(ls.layersync_document_sync(doc, err), "sync")
wait_until("the sync", 60, function()
  return not ls.layersync_document_has_unsynced_changes(doc)
     and ls.layersync_document_state(doc) == ffi.C.LAYERSYNC_DOCUMENT_STATE_CLEAN
end)
print("synced")

check(ls.layersync_client_destroy(client[0], err), "client_destroy")
print("ok")
