/* Conflict reports through the C ABI (docs/durability.md "Conflict reports"): B loses a
 * conflict; the report is listed by layersync_document_list_rejected_changes under a stable
 * report_id, marked delivered once did_reject_changes returned, and gone after
 * layersync_document_acknowledge_rejected_changes. Bad arguments give INVALID_ARGUMENT. The
 * kill -9 inside the callback is bindings/python/tests/test_rejection_reports.py. */
#include "ls_test.h"

#include <stdlib.h>
#include <time.h>

/* The reports listed for `document` (caller decrefs). */
static json_t *listed(layersync_document *document)
{
    layersync_error error = LAYERSYNC_ERROR_INIT;
    char *out = NULL;
    CHECK_OK(layersync_document_list_rejected_changes(document, &out, &error), &error);
    json_t *json = LS_JSON(out, "list_rejected_changes");
    layersync_free(out);
    CHECK_MSG(json_is_array(json), "list_rejected_changes must return an array");
    return json;
}

static void update_text(layersync_document *document, json_t *record, const char *text)
{
    json_object_set_new(json_object_get(record, "text"), "value", json_string(text));
    char *body = json_dumps(record, JSON_COMPACT);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_update_annotation(document, body, NULL, &error), &error);
    free(body);
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pypdf-commented.pdf"), "doc-reports");

    ls_events a_events, b_events;
    ls_events_init(&a_events);
    ls_events_init(&b_events);
    layersync_client *a = NULL, *b = NULL;
    layersync_document *a_doc = ls_open_downloaded(&server, "doc-reports", NULL, "alice", &a_events, &a, NULL);
    layersync_document *b_doc = ls_open_downloaded(&server, "doc-reports", NULL, "bob", &b_events, &b, NULL);
    layersync_error error = LAYERSYNC_ERROR_INIT;

    json_t *none = listed(b_doc);
    CHECK_MSG(json_array_size(none) == 0, "no report before any conflict");
    json_decref(none);

    const char *note = "{\"v\":2,\"type\":\"pspdfkit/note\",\"pageIndex\":0,\"bbox\":[50,60,20,20],"
                       "\"text\":{\"format\":\"plain\",\"value\":\"original\"},\"icon\":\"comment\"}";
    char *out = NULL;
    CHECK_OK(layersync_document_create_annotation(a_doc, note, &out, &error), &error);
    json_t *record = LS_JSON(out, "create_annotation");
    layersync_free(out);
    char id[64];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(record, "id")));
    ls_sync(a_doc, &a_events);
    ls_sync(b_doc, &b_events);

    update_text(a_doc, record, "A wins");
    update_text(b_doc, record, "B loses");
    ls_sync(a_doc, &a_events);
    ls_sync(b_doc, &b_events);
    LS_WAIT(&b_events, LS_TIMEOUT_MS, b_events.did_reject_changes >= 1);

    /* Listed with both versions and a stable id; delivered once the callback returned. */
    json_t *reports = NULL;
    struct timespec deadline;
    ls_deadline(&deadline, LS_TIMEOUT_MS);
    while (true) {
        reports = listed(b_doc);
        json_t *first = json_array_get(reports, 0);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (json_is_true(json_object_get(first, "delivered")) || now.tv_sec > deadline.tv_sec) break;
        json_decref(reports);
        nanosleep(&(struct timespec){.tv_nsec = 20000000}, NULL);
    }
    CHECK_MSG(json_array_size(reports) == 1, "one report, got %zu", json_array_size(reports));
    json_t *report = json_array_get(reports, 0);
    CHECK_STREQ(json_string_value(json_object_get(report, "id")), id);
    CHECK_STREQ(json_string_value(json_object_get(report, "reason")), "conflict");
    CHECK_MSG(json_integer_value(json_object_get(report, "code")) == LAYERSYNC_ERROR_CONFLICT, "code");
    CHECK_MSG(json_is_true(json_object_get(report, "delivered")), "delivered after the callback returned");
    const char *report_id = json_string_value(json_object_get(report, "report_id"));
    CHECK_MSG(report_id != NULL && strlen(report_id) == 26, "report_id is a ULID");
    CHECK_MSG(json_is_string(json_object_get(report, "change_id")), "change_id");
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(json_object_get(report, "local"), "text"), "value")),
                "B loses");
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(json_object_get(report, "server"), "text"), "value")),
                "A wins");

    /* Bad arguments. */
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_list_rejected_changes(NULL, &out, &error), &error);
    layersync_error_clear(&error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_list_rejected_changes(b_doc, NULL, &error), &error);
    layersync_error_clear(&error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_acknowledge_rejected_changes(b_doc, NULL, &error), &error);
    layersync_error_clear(&error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_acknowledge_rejected_changes(b_doc, "{\"a\":1}", &error),
             &error);
    layersync_error_clear(&error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_acknowledge_rejected_changes(b_doc, "[1]", &error), &error);
    layersync_error_clear(&error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_acknowledge_rejected_changes(NULL, "[]", &error), &error);
    layersync_error_clear(&error);
    json_t *still = listed(b_doc);
    CHECK_MSG(json_array_size(still) == 1, "a refused acknowledgement removes nothing");
    json_decref(still);

    /* Acknowledged: gone (an unknown id is ignored). */
    char ids[128];
    snprintf(ids, sizeof ids, "[\"%s\",\"01JUNKNOWNUNKNOWNUNKNOWN00\"]", report_id);
    CHECK_OK(layersync_document_acknowledge_rejected_changes(b_doc, ids, &error), &error);
    json_t *after = listed(b_doc);
    CHECK_MSG(json_array_size(after) == 0, "acknowledged reports are not listed");
    json_decref(after);
    json_decref(reports);
    json_decref(record);

    CHECK_CALLBACK_THREADS(&b_events);
    ls_client_destroy(a, &a_events);
    ls_client_destroy(b, &b_events);
    ls_events_free(&a_events);
    ls_events_free(&b_events);
    ls_server_stop(&server);
    return ls_pass("rejection_reports");
}
