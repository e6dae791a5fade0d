/* layersync_client_document_for_jwt: one handle per (document, layer); the JWT's shape is
 * checked offline (INVALID_JWT); NULL and invalid UTF-8 are INVALID_ARGUMENT. JWTs are built
 * here (unsigned: only the server checks signatures), so no server is needed. */
#include "ls_test.h"

#include <stdlib.h>

static layersync_document *doc_for(layersync_client *client, const char *payload)
{
    char *jwt = ls_make_jwt(payload);
    layersync_document *document = ls_document(client, jwt);
    free(jwt);
    return document;
}

static void check_invalid_jwt(layersync_client *client, const char *what, const char *jwt, int expected)
{
    layersync_document *document = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    int rc = layersync_client_document_for_jwt(client, jwt, &document, &error);
    char buf[512];
    CHECK_MSG(rc == expected, "document_for_jwt(%s) returned %s, expected %s", what,
              ls_describe(rc, &error, buf, sizeof buf), layersync_error_code_name(expected));
    CHECK_MSG(error.code == rc && error.message != NULL, "document_for_jwt(%s): error struct not filled", what);
    CHECK_MSG(document == NULL, "document_for_jwt(%s) failed but set *out_document", what);
    layersync_error_clear(&error);
}

static void check_invalid_payload(layersync_client *client, const char *what, const char *payload)
{
    char *jwt = ls_make_jwt(payload);
    check_invalid_jwt(client, what, jwt, LAYERSYNC_ERROR_INVALID_JWT);
    free(jwt);
}

int main(void)
{
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = ls_client_create(ls_closed_port_url(), ls_temp_dir("jwt"), &events);

    /* Same document and layer: same handle, whatever else differs in the token. */
    layersync_document *a = doc_for(client, "{\"document_id\":\"doc-1\",\"layer\":\"L1\",\"user_id\":\"u1\"}");
    layersync_document *b = doc_for(client, "{\"document_id\":\"doc-1\",\"layer\":\"L1\",\"user_id\":\"u1\"}");
    CHECK_MSG(a == b, "the same JWT twice gave two handles (%p, %p)", (void *)a, (void *)b);
    layersync_document *c = doc_for(client,
        "{\"document_id\":\"doc-1\",\"layer\":\"L1\",\"user_id\":\"u1\",\"exp\":4102444800}");
    CHECK_MSG(a == c, "another JWT for the same document and layer gave another handle");
    layersync_document *alias = doc_for(client, "{\"document_id\":\"doc-1\",\"layer_name\":\"L1\",\"user_id\":\"u1\"}");
    CHECK_MSG(a == alias, "claim layer_name (alias of layer) gave another handle");

    /* Other layer / other document: other handles. */
    layersync_document *other_layer = doc_for(client, "{\"document_id\":\"doc-1\",\"layer\":\"L2\",\"user_id\":\"u1\"}");
    layersync_document *default_layer = doc_for(client, "{\"document_id\":\"doc-1\",\"user_id\":\"u1\"}");
    layersync_document *other_doc = doc_for(client, "{\"document_id\":\"doc-2\",\"layer\":\"L1\",\"user_id\":\"u1\"}");
    CHECK(other_layer != a && default_layer != a && other_doc != a);
    CHECK(other_layer != default_layer && other_doc != other_layer && other_doc != default_layer);

    /* Getters. */
    CHECK_STREQ(layersync_document_id(a), "doc-1");
    CHECK_STREQ(layersync_document_layer_name(a), "L1");
    CHECK_STREQ(layersync_document_layer_name(default_layer), "");
    CHECK_STREQ(layersync_document_id(other_doc), "doc-2");
    CHECK(layersync_document_id(NULL) == NULL);
    CHECK(layersync_document_layer_name(NULL) == NULL);
    char *user = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_user_id(a, &user, &error), &error);
    CHECK_STREQ(user, "u1");
    layersync_free(user);
    layersync_document *anonymous = doc_for(client, "{\"document_id\":\"doc-3\"}");
    user = (char *)"sentinel";
    CHECK_OK(layersync_document_user_id(anonymous, &user, &error), &error);
    CHECK_MSG(user == NULL, "user_id of a JWT without user_id must be NULL");
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_user_id(NULL, &user, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_document_user_id(a, NULL, &error), &error);
    CHECK(layersync_document_state(a) == LAYERSYNC_DOCUMENT_STATE_UNKNOWN);
    CHECK(layersync_document_state(NULL) == LAYERSYNC_DOCUMENT_STATE_INVALID);
    CHECK(!layersync_document_is_downloaded(a));
    CHECK(!layersync_document_has_unsynced_changes(a));

    /* Text is byte-exact: a document id and layer with emoji and Arabic. */
    const char *uid = "doc-\xF0\x9F\x93\x84-\xD9\x85\xD8\xB3\xD8\xAA\xD9\x86\xD8\xAF"; /* doc-📄-مستند */
    const char *ulayer = "\xD8\xB7\xD8\xA8\xD9\x82\xD8\xA9-\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB"; /* طبقة-👩‍💻 */
    json_t *payload = json_pack("{s:s, s:s}", "document_id", uid, "layer", ulayer);
    char *payload_text = json_dumps(payload, JSON_COMPACT);
    layersync_document *unicode = doc_for(client, payload_text);
    CHECK_STREQ(layersync_document_id(unicode), uid);
    CHECK_STREQ(layersync_document_layer_name(unicode), ulayer);
    free(payload_text);
    json_decref(payload);

    /* Malformed tokens: INVALID_JWT. */
    check_invalid_jwt(client, "\"abc\"", "abc", LAYERSYNC_ERROR_INVALID_JWT);
    check_invalid_jwt(client, "\"\"", "", LAYERSYNC_ERROR_INVALID_JWT);
    check_invalid_jwt(client, "\"a.b.c\" (payload not base64url JSON)", "a.b.c", LAYERSYNC_ERROR_INVALID_JWT);
    char *p = ls_base64url((const unsigned char *)"not json", 8);
    char jwt[256];
    snprintf(jwt, sizeof jwt, "eyJhbGciOiJFUzI1NiJ9.%s.c2ln", p);
    check_invalid_jwt(client, "payload 'not json'", jwt, LAYERSYNC_ERROR_INVALID_JWT);
    free(p);
    snprintf(jwt, sizeof jwt, "eyJhbGciOiJFUzI1NiJ9.eyJkb2N1bWVudF9pZCI6ImQifQ");
    check_invalid_jwt(client, "two parts", jwt, LAYERSYNC_ERROR_INVALID_JWT);
    snprintf(jwt, sizeof jwt, "eyJhbGciOiJFUzI1NiJ9.eyJkb2N1bWVudF9pZCI6ImQifQ.c2ln.c2ln");
    check_invalid_jwt(client, "four parts", jwt, LAYERSYNC_ERROR_INVALID_JWT);
    check_invalid_payload(client, "payload without document_id", "{\"layer\":\"L1\",\"user_id\":\"u1\"}");
    check_invalid_payload(client, "document_id a number", "{\"document_id\":42}");
    check_invalid_payload(client, "payload an array", "[\"doc-1\"]");
    check_invalid_payload(client, "layer a number", "{\"document_id\":\"doc-1\",\"layer\":7}");
    check_invalid_payload(client, "user_id an object", "{\"document_id\":\"doc-1\",\"user_id\":{}}");
    check_invalid_payload(client, "exp a string", "{\"document_id\":\"doc-1\",\"exp\":\"tomorrow\"}");

    /* NULL and invalid UTF-8: INVALID_ARGUMENT. */
    check_invalid_jwt(client, "NULL", NULL, LAYERSYNC_ERROR_INVALID_ARGUMENT);
    check_invalid_jwt(client, "\"\\xff\\xfe\"", "\xff\xfe", LAYERSYNC_ERROR_INVALID_ARGUMENT);
    check_invalid_jwt(client, "overlong '/' \"\\xc0\\xaf\"", "a\xc0\xaf.b.c", LAYERSYNC_ERROR_INVALID_ARGUMENT);
    check_invalid_jwt(client, "lone surrogate \"\\xed\\xa0\\x80\"", "a.\xed\xa0\x80.c", LAYERSYNC_ERROR_INVALID_ARGUMENT);
    layersync_document *document = NULL;
    char *good = ls_make_jwt("{\"document_id\":\"doc-1\"}");
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_client_document_for_jwt(NULL, good, &document, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_client_document_for_jwt(client, good, NULL, &error), &error);
    free(good);

    /* Handles stay valid and unchanged after all this. */
    CHECK(doc_for(client, "{\"document_id\":\"doc-1\",\"layer\":\"L1\",\"user_id\":\"u1\"}") == a);
    CHECK_STREQ(layersync_document_id(a), "doc-1");

    ls_client_destroy(client, &events);
    ls_events_free(&events);
    return ls_pass("document_for_jwt");
}
