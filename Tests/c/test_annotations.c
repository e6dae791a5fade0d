/* Annotation records through the C ABI: create / get / list / update / delete round trip of
 * Instant JSON, compared with jansson; text byte-exact (emoji, Arabic, RTL marks, combining
 * characters; docs/rules.md rule 9); errors NO_SUCH_ANNOTATION, INVALID_ARGUMENT,
 * INVALID_JSON_STRUCTURE, INVALID_CUSTOM_DATA; a local write is durable (rule 1): a new client
 * on the same storage sees it and still has it pending. */
#include "ls_test.h"

#include <stdlib.h>

/* "Hello 😀 مرحبا بالعالم ‏שלום‏ 𝄞 é(e + U+0301) 👩🏽‍🔬" */
static const char TEXT[] = "Hello \xF0\x9F\x98\x80 \xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xD8\xA8\xD8\xA7\xD9\x84"
                           "\xD8\xB9\xD8\xA7\xD9\x84\xD9\x85 \xE2\x80\x8F\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D\xE2\x80\x8F "
                           "\xF0\x9D\x84\x9E e\xCC\x81 \xF0\x9F\x91\xA9\xF0\x9F\x8F\xBD\xE2\x80\x8D\xF0\x9F\x94\xAC";
/* "تعديل ✏️ 🇸🇦" */
static const char TEXT2[] = "\xD8\xAA\xD8\xB9\xD8\xAF\xD9\x8A\xD9\x84 \xE2\x9C\x8F\xEF\xB8\x8F \xF0\x9F\x87\xB8\xF0\x9F\x87\xA6";
/* "ليلى 🧑‍🎨" */
static const char CREATOR[] = "\xD9\x84\xD9\x8A\xD9\x84\xD9\x89 \xF0\x9F\xA7\x91\xE2\x80\x8D\xF0\x9F\x8E\xA8";

static json_t *note(const char *text)
{
    json_t *a = json_pack("{s:i, s:s, s:i, s:[f,f,f,f], s:f, s:s, s:s, s:s, s:{s:s, s:s}, s:s, s:s, s:{s:s, s:s, s:{s:i}}}",
                          "v", 2, "type", "pspdfkit/note", "pageIndex", 0, "bbox", 100.5, 200.25, 32.0, 32.0,
                          "opacity", 1.0, "createdAt", "2025-01-02T03:04:05Z", "updatedAt", "2025-01-02T03:04:05Z",
                          "creatorName", CREATOR, "text", "format", "plain", "value", text, "icon", "comment",
                          "color", "#FFD83F", "customData", "emoji", "\xF0\x9F\x8E\x89", "arabic",
                          "\xD9\x86\xD8\xB5", "nested", "n", 1);
    CHECK(a != NULL);
    return a;
}

static bool is_ulid(const char *id)
{
    if (id == NULL || strlen(id) != 26) return false;
    for (const char *p = id; *p; p++)
        if (strchr("0123456789ABCDEFGHJKMNPQRSTVWXYZ", *p) == NULL) return false;
    return true;
}

/* The text value, byte for byte (jansson strings carry their length). */
static void check_text(const json_t *annotation, const char *expected, const char *what)
{
    json_t *value = json_object_get(json_object_get(annotation, "text"), "value");
    CHECK_MSG(json_is_string(value), "%s: text.value missing", what);
    size_t n = json_string_length(value);
    CHECK_MSG(n == strlen(expected) && memcmp(json_string_value(value), expected, n) == 0,
              "%s: text.value not byte-exact: got \"%s\" (%zu bytes), expected \"%s\" (%zu bytes)", what,
              json_string_value(value), n, expected, strlen(expected));
}

static json_t *call_json(int rc, char *out, layersync_error *error, const char *what)
{
    char buf[512];
    CHECK_MSG(rc == LAYERSYNC_OK, "%s returned %s", what, ls_describe(rc, error, buf, sizeof buf));
    json_t *json = LS_JSON(out, what);
    layersync_free(out);
    return json;
}

static json_t *get(layersync_document *document, const char *id)
{
    char *out = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    int rc = layersync_document_get_annotation(document, id, &out, &error);
    return call_json(rc, out, &error, "get_annotation");
}

static json_t *list(layersync_document *document, const char *filter)
{
    char *out = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    int rc = layersync_document_list_annotations(document, filter, &out, &error);
    json_t *json = call_json(rc, out, &error, filter ? filter : "list_annotations(NULL)");
    CHECK_MSG(json_is_array(json), "list_annotations(%s) is not an array", filter ? filter : "NULL");
    return json;
}

static const json_t *find(const json_t *array, const char *id)
{
    size_t i;
    json_t *record;
    json_array_foreach(array, i, record)
    {
        const char *rid = json_string_value(json_object_get(record, "id"));
        if (rid && strcmp(rid, id) == 0) return record;
    }
    return NULL;
}

static void check_rejected(layersync_document *document, const char *json, int expected, const char *what)
{
    char *out = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    int rc = layersync_document_create_annotation(document, json, &out, &error);
    char buf[512];
    CHECK_LATER(rc == expected, "create_annotation(%s) returned %s, expected %s", what,
                ls_describe(rc, &error, buf, sizeof buf), layersync_error_code_name(expected));
    if (rc == LAYERSYNC_OK) {
        /* Accepted by mistake: remove it so that the rest of the test sees the layer it expects. */
        json_t *stored = out ? json_loads(out, 0, NULL) : NULL;
        const char *id = json_string_value(json_object_get(stored, "id"));
        if (id != NULL) layersync_document_delete_annotation(document, id, NULL);
        json_decref(stored);
        layersync_free(out);
    } else {
        CHECK_MSG(out == NULL, "create_annotation(%s) failed but returned JSON", what);
    }
    layersync_error_clear(&error);
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pypdf-example.pdf"), "doc-records");
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = NULL;
    char *jwt = NULL;
    layersync_document *document = ls_open_downloaded(&server, "doc-records", NULL, "alice", &events, &client, &jwt);
    const char *storage = layersync_client_storage_path(client);
    char storage_copy[1024];
    snprintf(storage_copy, sizeof storage_copy, "%s", storage);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    char *out = NULL;

    /* Create: an id (ULID) is generated; everything given comes back unchanged. */
    json_t *input = note(TEXT);
    char *input_text = json_dumps(input, JSON_COMPACT);
    int rc = layersync_document_create_annotation(document, input_text, &out, &error);
    json_t *created = call_json(rc, out, &error, "create_annotation");
    const char *id_value = json_string_value(json_object_get(created, "id"));
    CHECK_MSG(is_ulid(id_value), "created id \"%s\" is not a ULID", id_value ? id_value : "(none)");
    char id[32];
    snprintf(id, sizeof id, "%s", id_value);
    CHECK_JSON_SUBSET(input, created, "create_annotation output");
    check_text(created, TEXT, "create_annotation output");
    CHECK(layersync_document_has_unsynced_changes(document));
    CHECK_MSG(layersync_document_state(document) == LAYERSYNC_DOCUMENT_STATE_DIRTY,
              "state %d after a local create, expected DIRTY", (int)layersync_document_state(document));

    /* Get returns exactly what create returned. */
    json_t *got = get(document, id);
    CHECK_MSG(json_equal(got, created), "get_annotation differs from create_annotation's output");
    check_text(got, TEXT, "get_annotation");
    json_decref(got);

    /* Create with a caller-chosen id and without out_json. */
    json_t *second = note("second");
    json_object_set_new(second, "id", json_string("01J0000000000000000000TEST"));
    json_object_set_new(second, "pageIndex", json_integer(1));
    json_object_set_new(second, "type", json_string("pspdfkit/note"));
    char *second_text = json_dumps(second, JSON_COMPACT);
    CHECK_OK(layersync_document_create_annotation(document, second_text, NULL, &error), &error);
    got = get(document, "01J0000000000000000000TEST");
    CHECK_JSON_SUBSET(second, got, "annotation created with its own id");
    json_decref(got);

    /* List: all, filtered, paged; ordered by id. */
    json_t *all = list(document, NULL);
    const json_t *listed = find(all, id);
    CHECK_MSG(listed != NULL && json_equal(listed, created), "list_annotations lacks the created annotation");
    CHECK(find(all, "01J0000000000000000000TEST") != NULL);
    for (size_t i = 1; i < json_array_size(all); i++) {
        const char *prev = json_string_value(json_object_get(json_array_get(all, i - 1), "id"));
        const char *cur = json_string_value(json_object_get(json_array_get(all, i), "id"));
        if (!(prev && cur && strcmp(prev, cur) < 0)) {
            ls_fail_later(__FILE__, __LINE__, "list_annotations not ordered by id (header: \"ordered by id\"): "
                          "[%zu] %s before [%zu] %s", i - 1, prev, i, cur);
            break;
        }
    }
    size_t total = json_array_size(all);
    json_decref(all);
    json_t *page0 = list(document, "{\"pageIndex\":0}");
    CHECK(find(page0, id) != NULL && find(page0, "01J0000000000000000000TEST") == NULL);
    json_decref(page0);
    json_t *page1 = list(document, "{\"pageIndex\":1}");
    CHECK(find(page1, id) == NULL && find(page1, "01J0000000000000000000TEST") != NULL);
    json_decref(page1);
    json_t *inks = list(document, "{\"type\":\"pspdfkit/ink\"}");
    CHECK(find(inks, id) == NULL);
    json_decref(inks);
    json_t *filter = json_pack("{s:s}", "creatorName", CREATOR);
    char *filter_text = json_dumps(filter, JSON_COMPACT);
    json_t *by_creator = list(document, filter_text);
    CHECK_MSG(find(by_creator, id) != NULL, "creatorName filter (Arabic + emoji) did not match");
    json_decref(by_creator);
    free(filter_text);
    json_decref(filter);
    json_t *limited = list(document, "{\"limit\":1}");
    CHECK_MSG(json_array_size(limited) == 1, "limit 1 gave %zu records", json_array_size(limited));
    json_decref(limited);
    if (total >= 2) {
        json_t *offset = list(document, "{\"limit\":1,\"offset\":1}");
        CHECK(json_array_size(offset) == 1);
        json_decref(offset);
    }

    /* Update: the whole new content, by id. */
    json_t *changed = json_deep_copy(created);
    json_object_set_new(json_object_get(changed, "text"), "value", json_string(TEXT2));
    json_object_set_new(changed, "bbox", json_pack("[f,f,f,f]", 10.0, 20.0, 30.0, 40.0));
    char *changed_text = json_dumps(changed, JSON_COMPACT);
    rc = layersync_document_update_annotation(document, changed_text, &out, &error);
    json_t *updated = call_json(rc, out, &error, "update_annotation");
    CHECK_JSON_SUBSET(changed, updated, "update_annotation output");
    check_text(updated, TEXT2, "update_annotation output");
    got = get(document, id);
    CHECK_MSG(json_equal(got, updated), "get_annotation after update differs from update's output");
    check_text(got, TEXT2, "get_annotation after update");
    json_decref(got);
    json_t *missing = json_deep_copy(changed);
    json_object_set_new(missing, "id", json_string("01J00000000000000000NXST00"));
    char *missing_text = json_dumps(missing, JSON_COMPACT);
    CHECK_RC(LAYERSYNC_ERROR_NO_SUCH_ANNOTATION,
             layersync_document_update_annotation(document, missing_text, &out, &error), &error);

    /* Invalid input. */
    check_rejected(document, "{\"v\":2,\"type\":", LAYERSYNC_ERROR_INVALID_ARGUMENT, "truncated JSON");
    check_rejected(document, "not json at all", LAYERSYNC_ERROR_INVALID_ARGUMENT, "text that is not JSON");
    check_rejected(document, "[1,2,3]", LAYERSYNC_ERROR_INVALID_JSON_STRUCTURE, "a JSON array");
    check_rejected(document, "{\"v\":2,\"pageIndex\":0,\"bbox\":[1,2,3,4]}", LAYERSYNC_ERROR_INVALID_JSON_STRUCTURE,
                   "an object without type");
    check_rejected(document,
                   "{\"v\":2,\"type\":\"pspdfkit/note\",\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":0,\"bbox\":[1,2,3,4],\"customData\":\"x\"}",
                   LAYERSYNC_ERROR_INVALID_CUSTOM_DATA, "customData a string");
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_list_annotations(document, "{bad", &out, &error),
             &error);

    /* Delete. */
    CHECK_OK(layersync_document_delete_annotation(document, id, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_NO_SUCH_ANNOTATION, layersync_document_get_annotation(document, id, &out, &error),
             &error);
    CHECK_RC(LAYERSYNC_ERROR_NO_SUCH_ANNOTATION, layersync_document_delete_annotation(document, id, &error), &error);
    all = list(document, NULL);
    CHECK(find(all, id) == NULL);
    json_decref(all);

    /* Durable: a new client on the same storage has the document and the pending record. */
    ls_client_destroy(client, &events);
    ls_events_free(&events);
    ls_events again;
    ls_events_init(&again);
    client = ls_client_create(server.url, storage_copy, &again);
    document = ls_document(client, jwt);
    CHECK_MSG(layersync_document_is_downloaded(document), "a new client on the same storage lost the download");
    CHECK_MSG(layersync_document_has_unsynced_changes(document), "a new client on the same storage lost the pending "
              "changes");
    got = get(document, "01J0000000000000000000TEST");
    CHECK_JSON_SUBSET(second, got, "annotation read back by a new client");
    json_decref(got);
    CHECK_RC(LAYERSYNC_ERROR_NO_SUCH_ANNOTATION, layersync_document_get_annotation(document, id, &out, &error),
             &error);
    ls_client_destroy(client, &again);
    ls_events_free(&again);

    free(missing_text);
    json_decref(missing);
    free(changed_text);
    json_decref(changed);
    json_decref(updated);
    free(second_text);
    json_decref(second);
    json_decref(created);
    free(input_text);
    json_decref(input);
    free(jwt);
    ls_server_stop(&server);
    return ls_pass("annotations");
}
