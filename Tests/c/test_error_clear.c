/* layersync_error: filled on failure with code == return value and a message; cleared (strings
 * freed, fields reset, version kept) by layersync_error_clear. No server needed: the errors
 * come from layersync_client_create refusing a URL synchronously. */
#include "ls_test.h"

#include <malloc.h>
#include <stdlib.h>

#if defined(__SANITIZE_ADDRESS__)
#define LS_HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LS_HAVE_ASAN 1
#endif
#endif

static int failing_create(const char *storage, layersync_error *error)
{
    layersync_client_options options = ls_client_options("ftp://127.0.0.1:1/not-http", storage);
    layersync_client *client = NULL;
    int rc = layersync_client_create(&options, NULL, &client, error);
    CHECK_MSG(client == NULL, "layersync_client_create failed (%d) but set *out_client", rc);
    return rc;
}

static void check_cleared(const layersync_error *error, uint32_t version)
{
    CHECK(error->version == version);
    CHECK(error->code == 0);
    CHECK(error->message == NULL);
    CHECK(error->sqlite_extended_code == 0);
    CHECK(error->http_status == 0);
    CHECK(error->document_id == NULL);
    CHECK(error->record_id == NULL);
    CHECK(error->attachment_id == NULL);
}

int main(void)
{
    const char *storage = ls_temp_dir("error-clear");

    /* Filled: code equals the return value, message present. */
    layersync_error error = LAYERSYNC_ERROR_INIT;
    int rc = failing_create(storage, &error);
    CHECK_MSG(rc == LAYERSYNC_ERROR_INVALID_URL, "create with ftp:// URL returned %s (%d), expected INVALID_URL",
              layersync_error_code_name(rc), rc);
    CHECK(error.code == rc);
    CHECK(error.message != NULL && error.message[0] != '\0');
    CHECK(error.version == LAYERSYNC_ERROR_VERSION);

    layersync_error_clear(&error);
    check_cleared(&error, LAYERSYNC_ERROR_VERSION);
    layersync_error_clear(&error); /* clearing twice is harmless */
    check_cleared(&error, LAYERSYNC_ERROR_VERSION);

    /* A zeroed struct is accepted as version 1. */
    layersync_error zeroed;
    memset(&zeroed, 0, sizeof zeroed);
    rc = failing_create(storage, &zeroed);
    CHECK(rc == LAYERSYNC_ERROR_INVALID_URL);
    CHECK(zeroed.code == rc && zeroed.message != NULL);
    layersync_error_clear(&zeroed);
    CHECK(zeroed.code == 0 && zeroed.message == NULL);

    /* NULL error pointer is fine. */
    CHECK(failing_create(storage, NULL) == LAYERSYNC_ERROR_INVALID_URL);

#ifndef LS_HAVE_ASAN
    /* layersync_error_clear frees: compare the heap growth of N failures with clear against N
     * failures without an error struct. A clear that leaked the message would grow the heap by
     * at least N * (message length) bytes. (Under ASan, LeakSanitizer checks this instead.) */
    enum { N = 4000 };
    for (int i = 0; i < 50; i++) { /* warm up caches of the library */
        layersync_error e = LAYERSYNC_ERROR_INIT;
        failing_create(storage, &e);
        layersync_error_clear(&e);
        failing_create(storage, NULL);
    }
    struct mallinfo2 before = mallinfo2();
    for (int i = 0; i < N; i++) failing_create(storage, NULL);
    struct mallinfo2 middle = mallinfo2();
    size_t message_bytes = 0;
    for (int i = 0; i < N; i++) {
        layersync_error e = LAYERSYNC_ERROR_INIT;
        failing_create(storage, &e);
        message_bytes += e.message ? strlen(e.message) + 1 : 0;
        layersync_error_clear(&e);
    }
    struct mallinfo2 after = mallinfo2();
    long without_error = (long)middle.uordblks - (long)before.uordblks;
    long with_error = (long)after.uordblks - (long)middle.uordblks;
    fprintf(stderr, "heap growth over %d failures: %ld bytes without error struct, %ld with error + clear "
                    "(messages total %zu bytes)\n", N, without_error, with_error, message_bytes);
    CHECK_MSG(with_error - without_error < (long)message_bytes / 2,
              "layersync_error_clear does not free the error's strings: heap grew %ld bytes more over %d "
              "errors (messages %zu bytes)", with_error - without_error, N, message_bytes);
#endif
    return ls_pass("error_clear");
}
