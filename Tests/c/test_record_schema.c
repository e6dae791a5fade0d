/* The record schema at the C ABI (docs/protocol.md, "Record schema"): every invalid record of
 * the cases both sides share (api/record-schema-cases.json) is refused by create_annotation
 * with INVALID_JSON_STRUCTURE, the message naming the field, and nothing is stored or queued;
 * an update with an ill-typed field leaves the stored record as it was; a comment with an
 * ill-typed field is refused by create_comment; every valid case is accepted. */
#include "ls_test.h"

#include <stdlib.h>

static json_t *list_all(layersync_document *document)
{
    char *out = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_list_annotations(document, NULL, &out, &error), &error);
    json_t *all = LS_JSON(out, "list_annotations");
    layersync_free(out);
    return all;
}

/* rc must be INVALID_JSON_STRUCTURE with `field` quoted in the message and no output. */
static void check_refused(int rc, const layersync_error *error, const char *out, const char *field, const char *what)
{
    char buf[512], quoted[256];
    snprintf(quoted, sizeof quoted, "\"%s\"", field);
    CHECK_LATER(rc == LAYERSYNC_ERROR_INVALID_JSON_STRUCTURE, "%s: returned %s, expected INVALID_JSON_STRUCTURE", what,
                ls_describe(rc, error, buf, sizeof buf));
    CHECK_LATER(error->message != NULL && strstr(error->message, quoted) != NULL, "%s: message \"%s\" does not name %s",
                what, error->message ? error->message : "(none)", quoted);
    CHECK_LATER(out == NULL, "%s: refused but returned JSON", what);
}

int main(void)
{
    json_error_t parse_error;
    json_t *cases = json_load_file(LAYERSYNC_RECORD_SCHEMA_CASES, 0, &parse_error);
    CHECK_MSG(cases != NULL, "%s: %s", LAYERSYNC_RECORD_SCHEMA_CASES, parse_error.text);
    json_t *invalid = json_object_get(cases, "invalid"), *valid = json_object_get(cases, "valid");
    CHECK(json_array_size(invalid) >= 20 && json_array_size(valid) >= 10);

    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pypdf-example.pdf"), "doc-schema");
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = NULL;
    char *jwt = NULL;
    layersync_document *document = ls_open_downloaded(&server, "doc-schema", NULL, "alice", &events, &client, &jwt);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    char *out = NULL;
    json_t *before = list_all(document);

    /* Every invalid case: refused, the field named, nothing stored or queued. */
    size_t i;
    json_t *entry;
    json_array_foreach(invalid, i, entry)
    {
        char *text = json_dumps(json_object_get(entry, "record"), JSON_COMPACT);
        const char *name = json_string_value(json_object_get(entry, "name"));
        int rc = layersync_document_create_annotation(document, text, &out, &error);
        check_refused(rc, &error, out, json_string_value(json_object_get(entry, "field")), name);
        if (rc == LAYERSYNC_OK) layersync_free(out);
        out = NULL;
        layersync_error_clear(&error);
        free(text);
    }
    CHECK_MSG(!layersync_document_has_unsynced_changes(document), "a refused record was queued");
    json_t *after = list_all(document);
    CHECK_MSG(json_equal(before, after), "a refused record was stored");
    json_decref(after);

    /* An update with an ill-typed field leaves the record as it was. */
    const char *note = "{\"v\":2,\"type\":\"pspdfkit/note\",\"pageIndex\":0,\"bbox\":[1,2,3,4],"
                       "\"text\":{\"format\":\"plain\",\"value\":\"root\"},\"icon\":\"comment\",\"id\":\"schema-root\"}";
    CHECK_OK(layersync_document_create_annotation(document, note, NULL, &error), &error);
    char *stored = NULL;
    CHECK_OK(layersync_document_get_annotation(document, "schema-root", &stored, &error), &error);
    const char *ill_typed = "{\"v\":2,\"type\":\"pspdfkit/note\",\"pageIndex\":\"zero\",\"bbox\":[1,2,3,4],"
                            "\"text\":{\"format\":\"plain\",\"value\":\"edited\"},\"icon\":\"comment\",\"id\":\"schema-root\"}";
    int rc = layersync_document_update_annotation(document, ill_typed, &out, &error);
    check_refused(rc, &error, out, "pageIndex", "update with pageIndex \"zero\"");
    layersync_error_clear(&error);
    char *again = NULL;
    CHECK_OK(layersync_document_get_annotation(document, "schema-root", &again, &error), &error);
    CHECK_STREQ(again, stored);
    layersync_free(again);
    layersync_free(stored);

    /* A comment with an ill-typed field, and one without its required text. */
    rc = layersync_document_create_comment(document, "schema-root",
                                           "{\"pageIndex\":0,\"text\":{\"format\":\"plain\",\"value\":1}}", &out, &error);
    check_refused(rc, &error, out, "text.value", "comment with a number as text.value");
    layersync_error_clear(&error);
    rc = layersync_document_create_comment(document, "schema-root", "{\"pageIndex\":0}", &out, &error);
    check_refused(rc, &error, out, "text", "comment without text");
    layersync_error_clear(&error);
    char *comments = NULL;
    CHECK_OK(layersync_document_list_comments(document, "schema-root", &comments, &error), &error);
    CHECK_STREQ(comments, "[]");
    layersync_free(comments);

    /* Every valid case is accepted (ids given so that none collides). */
    json_array_foreach(valid, i, entry)
    {
        json_t *record = json_deep_copy(json_object_get(entry, "record"));
        char id[48];
        snprintf(id, sizeof id, "schema-valid-%zu", i);
        json_object_set_new(record, "id", json_string(id));
        char *text = json_dumps(record, JSON_COMPACT);
        char buf[512];
        rc = layersync_document_create_annotation(document, text, NULL, &error);
        CHECK_LATER(rc == LAYERSYNC_OK, "%s: refused: %s", json_string_value(json_object_get(entry, "name")),
                    ls_describe(rc, &error, buf, sizeof buf));
        layersync_error_clear(&error);
        free(text);
        json_decref(record);
    }

    json_decref(before);
    json_decref(cases);
    ls_client_destroy(client, &events);
    ls_events_free(&events);
    free(jwt);
    ls_server_stop(&server);
    return ls_pass("record_schema");
}
