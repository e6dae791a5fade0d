/* NULL and invalid UTF-8 on every string-taking function give INVALID_ARGUMENT (with the error
 * struct filled), as do NULL handles and NULL required out-parameters (docs/architecture.md
 * §5, §6; docs/rules.md rule 9). Uses a downloaded document so that argument checks are what
 * fails. */
#include "ls_test.h"

#include <math.h>
#include <stdlib.h>

#define BAD_UTF8 "\xff\xfe"

static const char *const bad_strings[] = {NULL, BAD_UTF8, "abc\xc3", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80"};
static const char *const bad_names[] = {"NULL", "\\xff\\xfe", "truncated sequence", "UTF-16 surrogate",
                                        "overlong encoding", "above U+10FFFF"};
#define N_BAD (sizeof bad_strings / sizeof bad_strings[0])

#define EXPECT_INVALID(call, what_fmt, ...)                                                     \
    do {                                                                                        \
        layersync_error e_ = LAYERSYNC_ERROR_INIT;                                              \
        int rc_ = (call);                                                                       \
        char buf_[512], what_[256];                                                             \
        snprintf(what_, sizeof what_, what_fmt, __VA_ARGS__);                                   \
        CHECK_MSG(rc_ == LAYERSYNC_ERROR_INVALID_ARGUMENT, "%s returned %s, expected INVALID_ARGUMENT", what_, \
                  ls_describe(rc_, &e_, buf_, sizeof buf_));                                    \
        CHECK_MSG(e_.code == LAYERSYNC_ERROR_INVALID_ARGUMENT && e_.message != NULL,            \
                  "%s: error struct not filled (code %d)", what_, (int)e_.code);                \
        layersync_error_clear(&e_);                                                             \
    } while (0)

/* A JSON text with `bad` spliced raw into a string value (so the JSON itself is invalid UTF-8). */
static char *json_with(const char *prefix, const char *bad, const char *suffix)
{
    size_t n = strlen(prefix) + strlen(bad) + strlen(suffix) + 1;
    char *s = malloc(n);
    snprintf(s, n, "%s%s%s", prefix, bad, suffix);
    return s;
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue20504.pdf"), "doc-args");
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = NULL;
    layersync_document *doc = ls_open_downloaded(&server, "doc-args", NULL, "alice", &events, &client, NULL);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    char *out = NULL;

    /* A record to address by id. */
    CHECK_OK(layersync_document_create_annotation(doc,
        "{\"v\":2,\"type\":\"pspdfkit/note\",\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":0,\"bbox\":[1,2,3,4],\"id\":\"01J0000000000000000000ARGS\"}",
        NULL, &error), &error);
    char *valid_jwt = ls_server_mint_token(&server, "doc-args", NULL, "alice", 0);

    for (size_t i = 0; i < N_BAD; i++) {
        const char *bad = bad_strings[i];
        const char *name = bad_names[i];

        /* layersync_client_create: server_url and storage_path. */
        layersync_client_options options = ls_client_options(bad, ls_temp_dir("args"));
        layersync_client *c = NULL;
        EXPECT_INVALID(layersync_client_create(&options, NULL, &c, &e_), "client_create(server_url %s)", name);
        CHECK(c == NULL);
        options = ls_client_options(server.url, bad);
        EXPECT_INVALID(layersync_client_create(&options, NULL, &c, &e_), "client_create(storage_path %s)", name);
        CHECK(c == NULL);

        layersync_document *d = NULL;
        EXPECT_INVALID(layersync_client_document_for_jwt(client, bad, &d, &e_), "document_for_jwt(%s)", name);
        EXPECT_INVALID(layersync_document_reauthenticate(doc, bad, &e_), "reauthenticate(%s)", name);
        EXPECT_INVALID(layersync_document_create_annotation(doc, bad, &out, &e_), "create_annotation(%s)", name);
        EXPECT_INVALID(layersync_document_update_annotation(doc, bad, &out, &e_), "update_annotation(%s)", name);
        EXPECT_INVALID(layersync_document_delete_annotation(doc, bad, &e_), "delete_annotation(%s)", name);
        EXPECT_INVALID(layersync_document_get_annotation(doc, bad, &out, &e_), "get_annotation(%s)", name);
        if (bad != NULL) { /* NULL filter means "all" */
            EXPECT_INVALID(layersync_document_list_annotations(doc, bad, &out, &e_), "list_annotations(%s)", name);

            /* Invalid UTF-8 inside JSON string values. */
            char *json = json_with("{\"v\":2,\"type\":\"pspdfkit/note\",\"icon\":\"comment\",\"pageIndex\":0,\"bbox\":[1,2,3,4],"
                                   "\"text\":{\"format\":\"plain\",\"value\":\"", bad, "\"}}");
            EXPECT_INVALID(layersync_document_create_annotation(doc, json, &out, &e_),
                           "create_annotation(text.value %s)", name);
            free(json);
            json = json_with("{\"v\":2,\"type\":\"pspdfkit/note\",\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":0,\"bbox\":[1,2,3,4],"
                             "\"id\":\"01J0000000000000000000ARGS\",\"creatorName\":\"", bad, "\"}");
            EXPECT_INVALID(layersync_document_update_annotation(doc, json, &out, &e_),
                           "update_annotation(creatorName %s)", name);
            free(json);
            json = json_with("{\"creatorName\":\"", bad, "\"}");
            EXPECT_INVALID(layersync_document_list_annotations(doc, json, &out, &e_),
                           "list_annotations(filter creatorName %s)", name);
            free(json);
            json = json_with("{\"document_id\":\"", bad, "\"}");
            char *jwt = ls_make_jwt(json);
            /* Valid UTF-8 JWT text whose payload decodes to invalid UTF-8: a malformed token. */
            layersync_error e = LAYERSYNC_ERROR_INIT;
            int rc = layersync_client_document_for_jwt(client, jwt, &d, &e);
            CHECK_MSG(rc == LAYERSYNC_ERROR_INVALID_JWT || rc == LAYERSYNC_ERROR_INVALID_ARGUMENT,
                      "document_for_jwt(payload with %s) returned %s (%d)", name, layersync_error_code_name(rc), rc);
            layersync_error_clear(&e);
            free(jwt);
            free(json);
        }
    }
    /* The record is untouched by all of that. */
    CHECK_OK(layersync_document_get_annotation(doc, "01J0000000000000000000ARGS", &out, &error), &error);
    json_t *record = LS_JSON(out, "get_annotation");
    layersync_free(out);
    CHECK(json_object_get(record, "creatorName") == NULL);
    json_decref(record);

    /* NULL handles. */
    EXPECT_INVALID(layersync_client_set_network_available(NULL, true, &e_), "%s", "set_network_available(NULL)");
    EXPECT_INVALID(layersync_document_user_id(NULL, &out, &e_), "%s", "document_user_id(NULL)");
    EXPECT_INVALID(layersync_document_pdf_path(NULL, &out, &e_), "%s", "pdf_path(NULL)");
    EXPECT_INVALID(layersync_document_download(NULL, &e_), "%s", "download(NULL)");
    EXPECT_INVALID(layersync_document_cancel_download(NULL, &e_), "%s", "cancel_download(NULL)");
    EXPECT_INVALID(layersync_document_sync(NULL, &e_), "%s", "sync(NULL)");
    EXPECT_INVALID(layersync_document_stop_syncing(NULL, false, &e_), "%s", "stop_syncing(NULL)");
    EXPECT_INVALID(layersync_document_start_listening(NULL, &e_), "%s", "start_listening(NULL)");
    EXPECT_INVALID(layersync_document_stop_listening(NULL, &e_), "%s", "stop_listening(NULL)");
    EXPECT_INVALID(layersync_document_set_sync_delay(NULL, 1.0, &e_), "%s", "set_sync_delay(NULL)");
    EXPECT_INVALID(layersync_document_reauthenticate(NULL, valid_jwt, &e_), "%s", "reauthenticate(NULL document)");
    EXPECT_INVALID(layersync_document_create_annotation(NULL, "{\"v\":2,\"type\":\"pspdfkit/note\",\"pageIndex\":0,\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\"}", &out, &e_), "%s",
                   "create_annotation(NULL document)");
    EXPECT_INVALID(layersync_document_update_annotation(NULL, "{}", &out, &e_), "%s", "update_annotation(NULL document)");
    EXPECT_INVALID(layersync_document_delete_annotation(NULL, "x", &e_), "%s", "delete_annotation(NULL document)");
    EXPECT_INVALID(layersync_document_get_annotation(NULL, "x", &out, &e_), "%s", "get_annotation(NULL document)");
    EXPECT_INVALID(layersync_document_list_annotations(NULL, NULL, &out, &e_), "%s", "list_annotations(NULL document)");
    CHECK(!layersync_document_is_downloaded(NULL));
    CHECK(!layersync_document_has_unsynced_changes(NULL));

    /* NULL required out-parameters. */
    EXPECT_INVALID(layersync_document_pdf_path(doc, NULL, &e_), "%s", "pdf_path(out NULL)");
    EXPECT_INVALID(layersync_document_get_annotation(doc, "01J0000000000000000000ARGS", NULL, &e_), "%s",
                   "get_annotation(out NULL)");
    EXPECT_INVALID(layersync_document_list_annotations(doc, NULL, NULL, &e_), "%s", "list_annotations(out NULL)");

    /* Values out of range. */
    EXPECT_INVALID(layersync_document_set_sync_delay(doc, NAN, &e_), "%s", "set_sync_delay(NaN)");
    CHECK_OK(layersync_document_set_sync_delay(doc, 2.5, &error), &error);
    CHECK(layersync_document_sync_delay(doc) == 2.5);
    CHECK_OK(layersync_document_set_sync_delay(doc, LAYERSYNC_SYNC_DISABLED, &error), &error);
    CHECK(layersync_document_sync_delay(doc) == LAYERSYNC_SYNC_DISABLED);

    /* reauthenticate: malformed token and another user's token. */
    CHECK_RC(LAYERSYNC_ERROR_INVALID_JWT, layersync_document_reauthenticate(doc, "abc", &error), &error);
    char *mallory = ls_server_mint_token(&server, "doc-args", NULL, "mallory", 0);
    CHECK_RC(LAYERSYNC_ERROR_USER_ID_MISMATCH, layersync_document_reauthenticate(doc, mallory, &error), &error);
    free(mallory);

    free(valid_jwt);
    ls_client_destroy(client, &events);
    ls_events_free(&events);
    ls_server_stop(&server);
    return ls_pass("invalid_arguments");
}
