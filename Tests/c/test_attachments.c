/* Attachments through the C ABI against the real server: add (content-addressed, durable,
 * uploaded before the record that references it), attachment_data, lazy
 * download_attachment on a second client, and the error codes ATTACHMENT_NOT_LOADED,
 * NO_SUCH_ATTACHMENT and COULD_NOT_CREATE_ATTACHMENT produced by real situations. */
#include "ls_test.h"

#include <libgen.h>
#include <stdlib.h>
#include <unistd.h>

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-att");
    ls_events events_a, events_b;
    ls_events_init(&events_a);
    ls_events_init(&events_b);
    layersync_client *client_a = NULL, *client_b = NULL;
    layersync_document *doc_a = ls_open_downloaded(&server, "doc-att", NULL, "alice", &events_a, &client_a, NULL);
    layersync_error error = LAYERSYNC_ERROR_INIT;

    unsigned char image[3000];
    for (size_t i = 0; i < sizeof image; i++) image[i] = (unsigned char)(i * 7 + (i >> 8));
    image[10] = 0; /* binary, with NULs */
    char *id = NULL, *again = NULL;
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_add_attachment(doc_a, NULL, 5, "image/png", &id, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_add_attachment(doc_a, image, sizeof image, "", &id, &error), &error);
    CHECK_OK(layersync_document_add_attachment(doc_a, image, sizeof image, "image/png", &id, &error), &error);
    CHECK_MSG(strlen(id) == 64, "attachment id %s is not a SHA-256 hex digest", id);
    CHECK_OK(layersync_document_add_attachment(doc_a, image, sizeof image, "image/png", &again, &error), &error);
    CHECK_STREQ(id, again);
    layersync_attachment local = LAYERSYNC_ATTACHMENT_INIT;
    CHECK_OK(layersync_document_attachment_data(doc_a, id, &local, &error), &error);
    CHECK(local.size_bytes == sizeof image && memcmp(local.data, image, sizeof image) == 0);
    CHECK_STREQ(local.content_type, "image/png");
    layersync_free(local.data);
    layersync_free(local.content_type);

    char record[512];
    snprintf(record, sizeof record,
             "{\"id\":\"img-1\",\"type\":\"pspdfkit/image\",\"pageIndex\":0,\"bbox\":[0,0,10,10],\"imageAttachmentId\":\"%s\"}", id);
    CHECK_OK(layersync_document_create_annotation(doc_a, record, NULL, &error), &error);
    ls_sync(doc_a, &events_a);

    /* A second client: the record arrives with the snapshot, the bytes only on request. */
    layersync_document *doc_b = ls_open_downloaded(&server, "doc-att", NULL, "bob", &events_b, &client_b, NULL);
    local = (layersync_attachment)LAYERSYNC_ATTACHMENT_INIT;
    CHECK(layersync_document_attachment_data(doc_b, id, &local, &error) == LAYERSYNC_ERROR_ATTACHMENT_NOT_LOADED);
    CHECK(error.code == LAYERSYNC_ERROR_ATTACHMENT_NOT_LOADED);
    CHECK_STREQ(error.attachment_id, id);
    layersync_error_clear(&error);

    /* COULD_NOT_CREATE_ATTACHMENT: a regular file where the attachments directory goes. */
    char *pdf = NULL;
    CHECK_OK(layersync_document_pdf_path(doc_b, &pdf, &error), &error);
    char blocker[2048];
    snprintf(blocker, sizeof blocker, "%s/attachments", dirname(pdf));
    FILE *file = fopen(blocker, "w");
    CHECK(file != NULL);
    fclose(file);
    char *blocked_id = NULL;
    CHECK(layersync_document_add_attachment(doc_b, "x", 1, "text/plain", &blocked_id, &error) ==
          LAYERSYNC_ERROR_COULD_NOT_CREATE_ATTACHMENT);
    CHECK(error.code == LAYERSYNC_ERROR_COULD_NOT_CREATE_ATTACHMENT && error.attachment_id != NULL && blocked_id == NULL);
    layersync_error_clear(&error);
    CHECK(unlink(blocker) == 0);
    layersync_free(pdf);

    ls_result download;
    ls_result_init(&download);
    CHECK_OK(layersync_document_download_attachment(doc_b, id, ls_on_result, &download, &error), &error);
    LS_WAIT(&download, LS_TIMEOUT_MS, download.calls == 1);
    CHECK_MSG(download.code == 0, "download_attachment failed with %d", download.code);
    json_t *info = LS_JSON(download.json, "download_attachment");
    CHECK(json_integer_value(json_object_get(info, "size_bytes")) == (json_int_t)sizeof image);
    json_decref(info);
    CHECK_OK(layersync_document_attachment_data(doc_b, id, &local, &error), &error);
    CHECK(local.size_bytes == sizeof image && memcmp(local.data, image, sizeof image) == 0);
    layersync_free(local.data);
    layersync_free(local.content_type);

    const char *unknown = "abababababababababababababababababababababababababababababababab";
    local = (layersync_attachment)LAYERSYNC_ATTACHMENT_INIT;
    CHECK_RC(LAYERSYNC_ERROR_NO_SUCH_ATTACHMENT, layersync_document_attachment_data(doc_b, unknown, &local, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_attachment_data(doc_b, "xyz", &local, &error), &error);
    ls_result missing;
    ls_result_init(&missing);
    CHECK_OK(layersync_document_download_attachment(doc_b, unknown, ls_on_result, &missing, &error), &error);
    LS_WAIT(&missing, LS_TIMEOUT_MS, missing.calls == 1);
    CHECK_MSG(missing.code == LAYERSYNC_ERROR_NO_SUCH_ATTACHMENT, "download of an unknown attachment: %d", missing.code);

    layersync_error_clear(&error);
    free(download.json);
    layersync_free(id);
    layersync_free(again);
    ls_client_destroy(client_a, &events_a);
    ls_client_destroy(client_b, &events_b);
    ls_events_free(&events_a);
    ls_events_free(&events_b);
    return ls_pass("attachments");
}
