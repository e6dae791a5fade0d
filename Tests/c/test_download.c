/* layersync_document_download against the real server: download_progress (monotonic, ends at
 * the PDF's size), did_finish_download, the local PDF byte-identical to the uploaded one, the
 * imported annotations present, state CLEAN; all callbacks on one thread that is not the
 * caller's. Also the failures: unknown document (INVALID_DOCUMENT), unsigned token
 * (ACCESS_DENIED), and the calls that need a download first (NOT_DOWNLOADED). */
#include "ls_test.h"

#include <stdlib.h>

static void check_download_fails(const ls_server *server, const char *jwt, int expected, const char *what)
{
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = ls_client_create(server->url, ls_temp_dir("download-fail"), &events);
    layersync_document *document = ls_document(client, jwt);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_download(document, &error), &error);
    LS_WAIT(&events, LS_DOWNLOAD_TIMEOUT_MS, events.did_fail_download >= 1 || events.did_finish_download >= 1);
    int finished, code;
    LS_GET(&events, events.did_finish_download, finished);
    LS_GET(&events, events.fail_download_code, code);
    CHECK_MSG(finished == 0, "download of %s succeeded", what);
    CHECK_MSG(code == expected, "download of %s failed with %s (%d), expected %s", what,
              layersync_error_code_name(code), code, layersync_error_code_name(expected));
    CHECK(!layersync_document_is_downloaded(document));
    ls_client_destroy(client, &events);
    CHECK_CALLBACK_THREADS(&events);
    ls_events_free(&events);
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    const char *pdf = ls_corpus_pdf("pdfjs-inks.pdf");
    ls_server_upload(&server, pdf, "doc-download");
    size_t pdf_size = 0;
    unsigned char *pdf_bytes = ls_read_file(pdf, &pdf_size);
    CHECK(pdf_bytes != NULL && pdf_size > 0);

    ls_events events;
    ls_events_init(&events);
    layersync_client *client = ls_client_create(server.url, ls_temp_dir("download"), &events);
    char *jwt = ls_server_mint_token(&server, "doc-download", NULL, "alice", 0);
    layersync_document *document = ls_document(client, jwt);
    layersync_error error = LAYERSYNC_ERROR_INIT;

    /* Before the download. */
    CHECK(!layersync_document_is_downloaded(document));
    char *out = NULL;
    CHECK_RC(LAYERSYNC_ERROR_NOT_DOWNLOADED, layersync_document_pdf_path(document, &out, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_NOT_DOWNLOADED, layersync_document_sync(document, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_NOT_DOWNLOADED, layersync_document_start_listening(document, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_NOT_DOWNLOADED,
             layersync_document_create_annotation(document,
                 "{\"v\":2,\"type\":\"pspdfkit/note\",\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":0,\"bbox\":[1,2,3,4]}", &out, &error),
             &error);
    CHECK_RC(LAYERSYNC_ERROR_NOT_DOWNLOADED, layersync_document_list_annotations(document, NULL, &out, &error), &error);

    /* The download. */
    ls_download(document, &events);
    pthread_mutex_lock(&events.mutex);
    int progress = events.download_progress, finished = events.did_finish_download;
    int64_t done = events.progress_done, total = events.progress_total;
    bool backwards = events.progress_went_backwards, over = events.progress_over_total;
    layersync_document *reported = events.last_document;
    pthread_mutex_unlock(&events.mutex);
    CHECK_MSG(progress >= 1, "download_progress never called");
    CHECK_MSG(!backwards, "download_progress bytes_done went backwards");
    CHECK_MSG(!over, "download_progress bytes_done exceeded bytes_total");
    CHECK_MSG(done == (int64_t)pdf_size, "last download_progress bytes_done = %lld, PDF has %zu bytes",
              (long long)done, pdf_size);
    CHECK_MSG(total == (int64_t)pdf_size || total == -1, "download_progress bytes_total = %lld, PDF has %zu bytes",
              (long long)total, pdf_size);
    CHECK_MSG(finished == 1, "did_finish_download called %d times", finished);
    CHECK_MSG(reported == document, "callbacks got document %p, the handle is %p", (void *)reported, (void *)document);
    CHECK_CALLBACK_THREADS(&events);

    /* The local PDF is the uploaded one, byte for byte. */
    char *path = NULL;
    CHECK_OK(layersync_document_pdf_path(document, &path, &error), &error);
    size_t local_size = 0;
    unsigned char *local = ls_read_file(path, &local_size);
    CHECK_MSG(local != NULL, "cannot read the downloaded PDF %s", path);
    CHECK_MSG(local_size == pdf_size && memcmp(local, pdf_bytes, pdf_size) == 0,
              "downloaded PDF %s (%zu bytes) differs from the uploaded %s (%zu bytes)", path, local_size, pdf, pdf_size);
    free(local);
    layersync_free(path);

    /* State and the layer snapshot (the PDF's own annotations were imported on upload). */
    CHECK_MSG(layersync_document_state(document) == LAYERSYNC_DOCUMENT_STATE_CLEAN, "state %d after download, "
              "expected CLEAN", (int)layersync_document_state(document));
    CHECK(!layersync_document_has_unsynced_changes(document));
    CHECK_OK(layersync_document_list_annotations(document, NULL, &out, &error), &error);
    json_t *list = LS_JSON(out, "list_annotations");
    layersync_free(out);
    CHECK_MSG(json_is_array(list) && json_array_size(list) >= 1,
              "the layer of pdfjs-inks.pdf should hold its imported ink annotations, got %zu records",
              json_array_size(list));
    size_t i;
    json_t *record;
    json_array_foreach(list, i, record)
    {
        const char *type = json_string_value(json_object_get(record, "type"));
        CHECK_MSG(type != NULL && strncmp(type, "pspdfkit/", 9) == 0, "record %zu has type %s", i, type ? type : "(none)");
        CHECK_MSG(json_is_string(json_object_get(record, "id")), "record %zu has no string id", i);
    }
    json_decref(list);

    CHECK_RC(LAYERSYNC_ERROR_ALREADY_DOWNLOADED, layersync_document_download(document, &error), &error);
    /* cancel_download with nothing running is a no-op. */
    CHECK_OK(layersync_document_cancel_download(document, &error), &error);
    CHECK(layersync_document_is_downloaded(document));

    ls_client_destroy(client, &events);
    ls_events_free(&events);
    free(jwt);

    /* Failures are reported through did_fail_download. */
    char *missing = ls_server_mint_token(&server, "doc-that-does-not-exist", NULL, "alice", 0);
    check_download_fails(&server, missing, LAYERSYNC_ERROR_INVALID_DOCUMENT, "an unknown document");
    free(missing);
    char *unsigned_jwt = ls_make_jwt("{\"document_id\":\"doc-download\",\"user_id\":\"alice\"}");
    check_download_fails(&server, unsigned_jwt, LAYERSYNC_ERROR_ACCESS_DENIED, "a document with an unsigned JWT");
    free(unsigned_jwt);

    free(pdf_bytes);
    ls_server_stop(&server);
    return ls_pass("download");
}
