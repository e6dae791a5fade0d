/* Runs against an INSTALLED liblayersync with the Swift toolchain's runtime directory hidden
 * (check_self_contained.sh): exercises the Swift runtime, Dispatch and SQLite inside the
 * library (client, background connection sequence, document handle, callbacks), then checks
 * that no file of the toolchain was mapped into the process.
 *
 *   probe <storage-dir> <hidden-dir>
 */
#define _POSIX_C_SOURCE 200809L
#include <layersync.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int validated;
static int released;

static void on_validate(void *context, const char *info, const layersync_error *error)
{
    (void)context;
    (void)info;
    (void)error;
    pthread_mutex_lock(&mutex);
    validated++;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&mutex);
}

static void on_release(void *context)
{
    (void)context;
    released++;
}

/* A JWT with an unchecked signature: document_for_jwt only checks its shape. */
static const char *jwt = "eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCJ9."
                         "eyJkb2N1bWVudF9pZCI6InByb2JlIiwidXNlcl9pZCI6InByb2JlIn0.c2ln";

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: probe <storage-dir> <hidden-dir>\n");
        return 2;
    }
    if (layersync_abi_version() != LAYERSYNC_ABI_VERSION) return 1;

    layersync_client_options options;
    if (layersync_client_options_init(&options, LAYERSYNC_CLIENT_OPTIONS_VERSION) != LAYERSYNC_OK) return 1;
    options.server_url = "http://127.0.0.1:9"; /* discard port: the validation fails fast */
    options.storage_path = argv[1];
    options.connect_timeout_s = 2;
    layersync_client_delegate delegate = LAYERSYNC_CLIENT_DELEGATE_INIT;
    delegate.server_did_validate = on_validate;
    delegate.release_context = on_release;

    layersync_client *client = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    if (layersync_client_create(&options, &delegate, &client, &error) != LAYERSYNC_OK) {
        fprintf(stderr, "client_create: %s: %s\n", layersync_error_code_name(error.code), error.message);
        return 1;
    }
    layersync_document *document = NULL;
    if (layersync_client_document_for_jwt(client, jwt, &document, &error) != LAYERSYNC_OK ||
        strcmp(layersync_document_id(document), "probe") != 0) {
        fprintf(stderr, "document_for_jwt: %s: %s\n", layersync_error_code_name(error.code), error.message);
        return 1;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 20;
    pthread_mutex_lock(&mutex);
    while (!validated && pthread_cond_timedwait(&cond, &mutex, &deadline) == 0) {
    }
    int got = validated;
    pthread_mutex_unlock(&mutex);
    if (!got) {
        fprintf(stderr, "server_did_validate never ran\n");
        return 1;
    }
    if (layersync_client_destroy(client, &error) != LAYERSYNC_OK || released != 1) {
        fprintf(stderr, "client_destroy failed or release_context ran %d times\n", released);
        return 1;
    }

    /* Nothing from the toolchain, and no Swift runtime library, is mapped. */
    FILE *maps = fopen("/proc/self/maps", "r");
    if (maps == NULL) return 1;
    char line[4096];
    int bad = 0;
    while (fgets(line, sizeof line, maps) != NULL) {
        if (strstr(line, argv[2]) != NULL || strstr(line, "libswift") != NULL ||
            strstr(line, "libFoundation") != NULL || strstr(line, "libdispatch") != NULL ||
            strstr(line, "icu") != NULL) {
            fprintf(stderr, "mapped: %s", line);
            bad = 1;
        }
    }
    fclose(maps);
    if (bad) return 1;
    printf("layersync %s self-contained\n", layersync_version());
    return 0;
}
