/* Oversized and hostile inputs from C (issue 5): a 1 MiB JWT, a 1 MiB server URL, a storage
 * path beyond PATH_MAX, annotation JSON nested 100 000 deep, a 1 MiB filter and a 16 MiB
 * annotation. Each is refused with a documented error code (or, for the 16 MiB annotation,
 * stored or refused as the header says) without crashing, and the client stays usable. */
#include "ls_test.h"

#include <limits.h>
#include <stdlib.h>

static char *repeat(char c, size_t n)
{
    char *s = malloc(n + 1);
    CHECK(s != NULL);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

static bool one_of(int rc, const int *codes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (rc == codes[i]) return true;
    return false;
}

#define CHECK_ONE_OF(call, what, ...)                                                           \
    do {                                                                                        \
        const int allowed_[] = {__VA_ARGS__};                                                   \
        layersync_error e_ = LAYERSYNC_ERROR_INIT;                                              \
        int rc_ = (call);                                                                       \
        CHECK_MSG(one_of(rc_, allowed_, sizeof allowed_ / sizeof allowed_[0]), "%s returned %s (%d)", what, \
                  layersync_error_code_name(rc_), rc_);                                         \
        CHECK_MSG(rc_ == 0 || (e_.code == rc_ && e_.message != NULL), "%s: error struct not filled", what); \
        layersync_error_clear(&e_);                                                             \
    } while (0)
#define E (&e_)

int main(void)
{
    const size_t MiB = 1024 * 1024;
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pypdf-example.pdf"), "doc-big");

    /* A 1 MiB server URL and a storage path longer than PATH_MAX. */
    {
        layersync_client *client = NULL;
        char *huge = repeat('a', MiB);
        memcpy(huge, "http://", 7);
        layersync_client_options options = ls_client_options(huge, ls_temp_dir("big-url"));
        CHECK_ONE_OF(layersync_client_create(&options, NULL, &client, E), "client_create(1 MiB URL)",
                     LAYERSYNC_ERROR_INVALID_URL, LAYERSYNC_ERROR_INVALID_ARGUMENT);
        CHECK(client == NULL);
        free(huge);

        size_t n = PATH_MAX + 100;
        char *path = malloc(n + 1);
        snprintf(path, n + 1, "%s/", ls_temp_dir("big-path"));
        size_t len = strlen(path);
        memset(path + len, 'p', n - len);
        path[n] = '\0';
        options = ls_client_options(server.url, path);
        CHECK_ONE_OF(layersync_client_create(&options, NULL, &client, E), "client_create(path > PATH_MAX)",
                     LAYERSYNC_ERROR_COULD_NOT_WRITE_TO_DISK, LAYERSYNC_ERROR_INVALID_ARGUMENT);
        if (client != NULL) layersync_client_destroy(client, NULL);
        free(path);
    }

    ls_events events;
    ls_events_init(&events);
    layersync_client *client = NULL;
    layersync_document *document = ls_open_downloaded(&server, "doc-big", NULL, "alice", &events, &client, NULL);

    /* A 1 MiB JWT. */
    {
        char *payload = repeat('x', MiB);
        char *jwt = ls_make_jwt(payload);
        layersync_document *other = NULL;
        CHECK_ONE_OF(layersync_client_document_for_jwt(client, jwt, &other, E), "document_for_jwt(1 MiB JWT)",
                     LAYERSYNC_ERROR_INVALID_JWT, LAYERSYNC_ERROR_INVALID_ARGUMENT);
        free(jwt);
        free(payload);
    }

    /* JSON nested 100 000 deep: refused, not a stack overflow. */
    {
        size_t depth = 100000;
        char *nested = malloc(2 * depth + 256);
        size_t k = 0;
        k += (size_t)sprintf(nested, "{\"v\":2,\"type\":\"pspdfkit/note\",\"pageIndex\":0,\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"customData\":");
        memset(nested + k, '[', depth);
        k += depth;
        memset(nested + k, ']', depth);
        k += depth;
        strcpy(nested + k, "}");
        char *out = NULL;
        CHECK_ONE_OF(layersync_document_create_annotation(document, nested, &out, E), "create_annotation(deep JSON)",
                     LAYERSYNC_ERROR_INVALID_JSON_STRUCTURE, LAYERSYNC_ERROR_INVALID_ARGUMENT,
                     LAYERSYNC_ERROR_INVALID_CUSTOM_DATA);
        layersync_free(out);
        out = NULL;
        CHECK_ONE_OF(layersync_document_list_annotations(document, nested, &out, E), "list_annotations(deep filter)",
                     LAYERSYNC_ERROR_INVALID_JSON_STRUCTURE, LAYERSYNC_ERROR_INVALID_ARGUMENT);
        layersync_free(out);
        free(nested);
    }

    /* A 1 MiB filter of unknown shape. */
    {
        char *filter = repeat(' ', MiB);
        filter[0] = '{';
        filter[MiB - 1] = '}';
        char *out = NULL;
        CHECK_ONE_OF(layersync_document_list_annotations(document, filter, &out, E), "list_annotations(1 MiB filter)",
                     LAYERSYNC_OK, LAYERSYNC_ERROR_INVALID_JSON_STRUCTURE, LAYERSYNC_ERROR_INVALID_ARGUMENT);
        layersync_free(out);
        free(filter);
    }

    /* A 16 MiB annotation: stored locally (durable) or refused as too large. */
    {
        char *text = repeat('t', 16 * MiB);
        json_t *note = json_pack("{s:i, s:s, s:i, s:[i,i,i,i], s:{s:s, s:s}, s:s}", "v", 2, "type", "pspdfkit/note",
                                 "pageIndex", 0, "bbox", 1, 1, 2, 2, "text", "format", "plain", "value", text,
                                 "icon", "comment");
        char *json = json_dumps(note, JSON_COMPACT);
        char *out = NULL;
        CHECK_ONE_OF(layersync_document_create_annotation(document, json, &out, E), "create_annotation(16 MiB)",
                     LAYERSYNC_OK, LAYERSYNC_ERROR_PAYLOAD_LIMIT_EXCEEDED, LAYERSYNC_ERROR_INVALID_ARGUMENT);
        layersync_free(out);
        free(json);
        json_decref(note);
        free(text);
    }

    /* Still usable. */
    char *out = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_list_annotations(document, NULL, &out, &error), &error);
    json_t *list = LS_JSON(out, "list_annotations after the oversized inputs");
    CHECK(json_is_array(list));
    json_decref(list);
    layersync_free(out);

    ls_client_destroy(client, &events);
    ls_events_free(&events);
    ls_server_stop(&server);
    return ls_pass("oversized_inputs");
}
