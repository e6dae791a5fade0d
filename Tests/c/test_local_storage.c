/* Local storage and the disk cache through the C ABI, against the real server:
 * layersync_client_local_documents (grouped by document id), layersync_client_list_cache_entries,
 * layersync_client_remove_unreferenced_cache_entries (removes an orphaned attachment, keeps
 * what is referenced), layersync_document_remove_local_storage (state INVALID reported once,
 * handle stays valid, calls fail with INVALID_STATE, a new handle for the same layer works),
 * layersync_client_remove_local_storage_for_document and layersync_client_remove_local_storage. */
#include "ls_test.h"

#include <libgen.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static json_t *call_json(int (*fn)(layersync_client *, char **, layersync_error *), layersync_client *client,
                         const char *what)
{
    char *out = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(fn(client, &out, &error), &error);
    json_t *json = LS_JSON(out, what);
    layersync_free(out);
    return json;
}

static json_t *find_entry(json_t *entries, const char *document_id, const char *kind)
{
    size_t index;
    json_t *entry;
    json_array_foreach(entries, index, entry)
    {
        if (strcmp(json_string_value(json_object_get(entry, "document_id")), document_id) == 0 &&
            strcmp(json_string_value(json_object_get(entry, "kind")), kind) == 0)
            return entry;
    }
    return NULL;
}

/* Call with events->mutex held (inside LS_WAIT). */
static int count_invalid_locked(const ls_events *events)
{
    int count = 0;
    for (int i = 0; i < events->did_change_sync_state && i < LS_MAX_STATES; i++)
        if (events->states[i] == LAYERSYNC_DOCUMENT_STATE_INVALID) count++;
    return count;
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-a");
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-b");
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = NULL;
    char *jwt_a = NULL;
    layersync_document *doc_a = ls_open_downloaded(&server, "doc-a", NULL, "alice", &events, &client, &jwt_a);
    char *jwt_b = ls_server_mint_token(&server, "doc-b", "review", "alice", 0);
    layersync_document *doc_b = ls_document(client, jwt_b);
    ls_download(doc_b, &events);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    char *out = NULL;
    CHECK_OK(layersync_document_create_annotation(doc_a, "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":0}", &out, &error), &error);
    layersync_free(out);

    /* Invalid arguments. */
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_client_local_documents(NULL, &out, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_client_local_documents(client, NULL, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_client_list_cache_entries(client, NULL, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_client_remove_unreferenced_cache_entries(NULL, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_client_remove_local_storage(NULL, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_client_remove_local_storage_for_document(client, NULL, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_remove_local_storage(NULL, &error), &error);

    /* Local documents, grouped by document id. */
    json_t *local = call_json(layersync_client_local_documents, client, "local_documents");
    CHECK_MSG(json_object_size(local) == 2, "expected 2 documents: %s", json_dumps(local, 0));
    json_t *layer_a = json_array_get(json_object_get(local, "doc-a"), 0);
    json_t *layer_b = json_array_get(json_object_get(local, "doc-b"), 0);
    CHECK(layer_a && layer_b);
    CHECK_STREQ(json_string_value(json_object_get(layer_a, "layer_name")), "");
    CHECK_STREQ(json_string_value(json_object_get(layer_b, "layer_name")), "review");
    CHECK(json_is_true(json_object_get(layer_a, "downloaded")) && json_is_true(json_object_get(layer_a, "has_unsynced_changes")));
    CHECK(json_is_false(json_object_get(layer_b, "has_unsynced_changes")) && json_is_false(json_object_get(layer_b, "locked")));
    json_decref(local);

    /* Cache entries; an orphaned attachment is unreferenced and removed, the rest stays. */
    json_t *entries = call_json(layersync_client_list_cache_entries, client, "list_cache_entries");
    json_t *pdf_a = find_entry(entries, "doc-a", "pdf");
    CHECK(pdf_a && json_is_true(json_object_get(pdf_a, "referenced")));
    CHECK(json_integer_value(json_object_get(pdf_a, "size_bytes")) > 0);
    CHECK(find_entry(entries, "doc-b", "layer") != NULL);
    char pdf_path[2048], orphan[2300];
    snprintf(pdf_path, sizeof pdf_path, "%s", json_string_value(json_object_get(pdf_a, "path")));
    json_decref(entries);
    char *pdf_copy = strdup(pdf_path);
    snprintf(orphan, sizeof orphan, "%s/attachments", dirname(pdf_copy));
    free(pdf_copy);
    CHECK(mkdir(orphan, 0700) == 0 || errno == EEXIST);
    strcat(orphan, "/0000000000000000000000000000000000000000000000000000000000000000");
    FILE *file = fopen(orphan, "w");
    CHECK(file != NULL);
    fputs("orphan", file);
    fclose(file);
    entries = call_json(layersync_client_list_cache_entries, client, "list_cache_entries");
    json_t *attachment = find_entry(entries, "doc-a", "attachment");
    CHECK(attachment && json_is_false(json_object_get(attachment, "referenced")));
    json_decref(entries);
    CHECK_OK(layersync_client_remove_unreferenced_cache_entries(client, &error), &error);
    CHECK_MSG(access(orphan, F_OK) != 0, "the unreferenced attachment is still there");
    CHECK_MSG(access(pdf_path, F_OK) == 0, "a referenced PDF was removed");
    CHECK(layersync_document_is_downloaded(doc_a));

    /* Removing one layer's storage: INVALID once, handle valid, calls refused, new handle works. */
    CHECK_OK(layersync_document_remove_local_storage(doc_a, &error), &error);
    CHECK(layersync_document_state(doc_a) == LAYERSYNC_DOCUMENT_STATE_INVALID);
    CHECK_STREQ(layersync_document_id(doc_a), "doc-a");
    CHECK(!layersync_document_is_downloaded(doc_a) && !layersync_document_has_unsynced_changes(doc_a));
    CHECK_RC(LAYERSYNC_ERROR_INVALID_STATE,
             layersync_document_create_annotation(doc_a, "{\"type\":\"pspdfkit/note\",\"pageIndex\":0,\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\"}", &out, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_STATE, layersync_document_sync(doc_a, &error), &error);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.did_change_sync_state > 0 && events.states[events.did_change_sync_state - 1] == LAYERSYNC_DOCUMENT_STATE_INVALID);
    CHECK_OK(layersync_document_remove_local_storage(doc_a, &error), &error); /* again: nothing to do */
    CHECK_MSG(access(pdf_path, F_OK) != 0, "the PDF of a document without layers was kept");
    local = call_json(layersync_client_local_documents, client, "local_documents");
    CHECK(json_object_get(local, "doc-a") == NULL && json_object_get(local, "doc-b") != NULL);
    json_decref(local);
    layersync_document *doc_a2 = ls_document(client, jwt_a);
    CHECK(doc_a2 != doc_a && !layersync_document_is_downloaded(doc_a2));
    ls_download(doc_a2, &events);
    CHECK(layersync_document_state(doc_a2) == LAYERSYNC_DOCUMENT_STATE_CLEAN);

    /* One document, then everything. */
    CHECK_OK(layersync_client_remove_local_storage_for_document(client, "doc-b", &error), &error);
    CHECK(layersync_document_state(doc_b) == LAYERSYNC_DOCUMENT_STATE_INVALID);
    CHECK(layersync_document_state(doc_a2) == LAYERSYNC_DOCUMENT_STATE_CLEAN);
    CHECK_OK(layersync_client_remove_local_storage_for_document(client, "doc-b", &error), &error); /* has a handle: no error */
    CHECK_RC(LAYERSYNC_ERROR_UNMANAGED_DOCUMENT,
             layersync_client_remove_local_storage_for_document(client, "never-stored", &error), &error);
    layersync_error_clear(&error);
    CHECK_OK(layersync_client_remove_local_storage(client, &error), &error);
    CHECK(layersync_document_state(doc_a2) == LAYERSYNC_DOCUMENT_STATE_INVALID);
    local = call_json(layersync_client_local_documents, client, "local_documents");
    CHECK_MSG(json_object_size(local) == 0, "storage left after remove_local_storage");
    json_decref(local);
    LS_WAIT(&events, LS_TIMEOUT_MS, count_invalid_locked(&events) >= 3);
    ls_client_destroy(client, &events); /* drains every queued callback */
    CHECK_MSG(count_invalid_locked(&events) == 3, "INVALID reported %d times for 3 removed handles",
              count_invalid_locked(&events));

    CHECK_CALLBACK_THREADS(&events);
    ls_events_free(&events);
    free(jwt_a);
    free(jwt_b);
    return ls_pass("local_storage");
}
