/* layersync-example: a small command-line client of liblayersync.
 *
 *   layersync-example --server URL --storage DIR --jwt JWT COMMAND [ARG]
 *
 *   download        download the PDF and the layer; prints the local PDF path
 *   list [FILTER]   prints one line per annotation: id, type, pageIndex (FILTER: JSON, see
 *                   layersync_document_list_annotations)
 *   add JSON        adds an Instant JSON annotation locally; prints its id
 *   sync            sends local changes and receives the server's; waits for the outcome
 *   listen [N]      prints the server's changes as they arrive, until SIGINT/SIGTERM
 *                   (or after N change events); exits 0
 *
 * --server, --storage and --jwt default to $LAYERSYNC_SERVER, $LAYERSYNC_STORAGE and
 * $LAYERSYNC_JWT, as in the Python package's `layersync` CLI (the former $LAYERSYNC_SERVER_URL
 * is still read when $LAYERSYNC_SERVER is unset). Every command except `download` downloads
 * first when needed. The local store survives between runs: `add` in one run and `sync` in the
 * next is fine.
 *
 * How it uses the library (docs/threading.md): the delegate's callbacks run on the client's
 * callback thread; they only record into `struct app` under its mutex and signal the main
 * thread, which waits with a deadline. Exit status: 0, or 1 with the error on stderr. */
#define _POSIX_C_SOURCE 200809L
#include <layersync.h>

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct app {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int downloads_finished, downloads_failed;
    int syncs_finished, syncs_failed;
    int changes; /* did_receive_changes events */
    int validated;
    int last_error_code;
    char last_error[512];
};

static volatile sig_atomic_t interrupted;

static void on_signal(int signo)
{
    (void)signo;
    interrupted = 1;
}

static void record_error(struct app *app, const layersync_error *error)
{
    app->last_error_code = error ? error->code : LAYERSYNC_ERROR_UNKNOWN;
    snprintf(app->last_error, sizeof app->last_error, "%s: %s", layersync_error_code_name(app->last_error_code),
             error && error->message ? error->message : "");
}

static void on_validate(void *context, const char *info, const layersync_error *error)
{
    struct app *app = context;
    (void)info;
    pthread_mutex_lock(&app->mutex);
    app->validated = 1;
    if (error && error->code != LAYERSYNC_ERROR_CANCELLED)
        fprintf(stderr, "warning: server not reachable (%s)\n", layersync_error_code_name(error->code));
    pthread_cond_broadcast(&app->cond);
    pthread_mutex_unlock(&app->mutex);
}

static void on_finish_download(void *context, layersync_document *document)
{
    struct app *app = context;
    (void)document;
    pthread_mutex_lock(&app->mutex);
    app->downloads_finished++;
    pthread_cond_broadcast(&app->cond);
    pthread_mutex_unlock(&app->mutex);
}

static void on_fail_download(void *context, layersync_document *document, const layersync_error *error)
{
    struct app *app = context;
    (void)document;
    pthread_mutex_lock(&app->mutex);
    app->downloads_failed++;
    record_error(app, error);
    pthread_cond_broadcast(&app->cond);
    pthread_mutex_unlock(&app->mutex);
}

static void on_finish_sync(void *context, layersync_document *document)
{
    struct app *app = context;
    (void)document;
    pthread_mutex_lock(&app->mutex);
    app->syncs_finished++;
    pthread_cond_broadcast(&app->cond);
    pthread_mutex_unlock(&app->mutex);
}

static void on_fail_sync(void *context, layersync_document *document, const layersync_error *error)
{
    struct app *app = context;
    (void)document;
    pthread_mutex_lock(&app->mutex);
    app->syncs_failed++;
    record_error(app, error);
    pthread_cond_broadcast(&app->cond);
    pthread_mutex_unlock(&app->mutex);
}

/* value: {"created": [ids], "updated": [ids], "deleted": [ids]} */
static void on_receive_changes(void *context, layersync_document *document, const char *value)
{
    struct app *app = context;
    json_error_t jerr;
    json_t *changes = json_loads(value, 0, &jerr);
    const char *kinds[] = {"created", "updated", "deleted"};
    pthread_mutex_lock(&app->mutex);
    for (size_t k = 0; changes != NULL && k < 3; k++) {
        size_t i;
        json_t *id;
        json_array_foreach(json_object_get(changes, kinds[k]), i, id)
        {
            printf("%s %s %s\n", kinds[k], layersync_document_id(document), json_string_value(id));
        }
    }
    fflush(stdout);
    app->changes++;
    pthread_cond_broadcast(&app->cond);
    pthread_mutex_unlock(&app->mutex);
    json_decref(changes);
}

static void on_fail_authentication(void *context, layersync_document *document, const layersync_error *error)
{
    (void)context;
    fprintf(stderr, "authentication of %s failed (%s): mint a new token\n", layersync_document_id(document),
            layersync_error_code_name(error ? error->code : 0));
}

static int fail(const char *what, const layersync_error *error)
{
    fprintf(stderr, "%s: %s: %s\n", what, layersync_error_code_name(error->code),
            error->message ? error->message : "");
    return 1;
}

/* Waits until *counter exceeds `before` or *failed exceeds `failed_before`, or the timeout. */
static int wait_for(struct app *app, const int *counter, int before, const int *failed, int failed_before,
                    int timeout_s)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_s;
    int rc = 0;
    pthread_mutex_lock(&app->mutex);
    while (*counter == before && *failed == failed_before && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&app->cond, &app->mutex, &deadline);
    int ok = *counter > before;
    pthread_mutex_unlock(&app->mutex);
    if (rc == ETIMEDOUT) fprintf(stderr, "timed out after %d s\n", timeout_s);
    return ok;
}

static int download(struct app *app, layersync_document *document)
{
    layersync_error error = LAYERSYNC_ERROR_INIT;
    pthread_mutex_lock(&app->mutex);
    int finished = app->downloads_finished, failed = app->downloads_failed;
    pthread_mutex_unlock(&app->mutex);
    if (layersync_document_download(document, &error) != LAYERSYNC_OK) {
        int rc = fail("download", &error);
        layersync_error_clear(&error);
        return rc;
    }
    if (!wait_for(app, &app->downloads_finished, finished, &app->downloads_failed, failed, 120)) {
        fprintf(stderr, "download: %s\n", app->last_error);
        return 1;
    }
    return 0;
}

static int list(layersync_document *document, const char *filter)
{
    layersync_error error = LAYERSYNC_ERROR_INIT;
    char *out = NULL;
    if (layersync_document_list_annotations(document, filter, &out, &error) != LAYERSYNC_OK) {
        int rc = fail("list", &error);
        layersync_error_clear(&error);
        return rc;
    }
    json_error_t jerr;
    json_t *annotations = json_loads(out, 0, &jerr);
    layersync_free(out);
    if (!json_is_array(annotations)) {
        fprintf(stderr, "list: not a JSON array: %s\n", jerr.text);
        json_decref(annotations);
        return 1;
    }
    size_t i;
    json_t *annotation;
    json_array_foreach(annotations, i, annotation)
    {
        printf("%s\t%s\t%lld\n", json_string_value(json_object_get(annotation, "id")),
               json_string_value(json_object_get(annotation, "type")),
               (long long)json_integer_value(json_object_get(annotation, "pageIndex")));
    }
    printf("%zu annotation(s)\n", json_array_size(annotations));
    json_decref(annotations);
    return 0;
}

static int add(layersync_document *document, const char *annotation_json)
{
    layersync_error error = LAYERSYNC_ERROR_INIT;
    char *out = NULL;
    if (layersync_document_create_annotation(document, annotation_json, &out, &error) != LAYERSYNC_OK) {
        int rc = fail("add", &error);
        layersync_error_clear(&error);
        return rc;
    }
    json_t *stored = json_loads(out, 0, NULL);
    layersync_free(out);
    printf("%s\n", json_string_value(json_object_get(stored, "id")));
    json_decref(stored);
    return 0;
}

static int sync_now(struct app *app, layersync_document *document)
{
    layersync_error error = LAYERSYNC_ERROR_INIT;
    pthread_mutex_lock(&app->mutex);
    int finished = app->syncs_finished, failed = app->syncs_failed;
    pthread_mutex_unlock(&app->mutex);
    if (layersync_document_sync(document, &error) != LAYERSYNC_OK) {
        int rc = fail("sync", &error);
        layersync_error_clear(&error);
        return rc;
    }
    if (!wait_for(app, &app->syncs_finished, finished, &app->syncs_failed, failed, 60)) {
        fprintf(stderr, "sync: %s\n", app->last_error);
        return 1;
    }
    printf("synced%s\n", layersync_document_has_unsynced_changes(document) ? " (changes still pending)" : "");
    return 0;
}

static int listen_changes(struct app *app, layersync_document *document, int max_events)
{
    layersync_error error = LAYERSYNC_ERROR_INIT;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (layersync_document_start_listening(document, &error) != LAYERSYNC_OK) {
        int rc = fail("listen", &error);
        layersync_error_clear(&error);
        return rc;
    }
    printf("listening for changes of %s (Ctrl-C to stop)\n", layersync_document_id(document));
    fflush(stdout);
    /* The signal handler only sets a flag; this loop notices it within 200 ms. */
    pthread_mutex_lock(&app->mutex);
    while (!interrupted && (max_events <= 0 || app->changes < max_events)) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_nsec += 200 * 1000 * 1000;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&app->cond, &app->mutex, &deadline);
    }
    pthread_mutex_unlock(&app->mutex);
    layersync_document_stop_listening(document, NULL);
    printf("stopped\n");
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: layersync-example [--server URL] [--storage DIR] [--jwt JWT] "
                    "download | list [FILTER] | add JSON | sync | listen [N]\n"
                    "  --server, --storage, --jwt default to $LAYERSYNC_SERVER, $LAYERSYNC_STORAGE, $LAYERSYNC_JWT\n");
}

/* Says which of the three settings is missing (exit status 2). */
static int missing_setting(const char *flag, const char *variable)
{
    fprintf(stderr, "layersync-example: %s is required (or set $%s)\n", flag, variable);
    usage();
    return 2;
}

int main(int argc, char **argv)
{
    const char *server = getenv("LAYERSYNC_SERVER");
    if (server == NULL) server = getenv("LAYERSYNC_SERVER_URL");
    const char *storage = getenv("LAYERSYNC_STORAGE");
    const char *jwt = getenv("LAYERSYNC_JWT");
    int i = 1;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (strcmp(argv[i], "--server") == 0) server = argv[i + 1];
        else if (strcmp(argv[i], "--storage") == 0) storage = argv[i + 1];
        else if (strcmp(argv[i], "--jwt") == 0) jwt = argv[i + 1];
        else break;
    }
    if (i < argc && (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)) {
        usage();
        return 0;
    }
    if (i >= argc) {
        fprintf(stderr, "layersync-example: no command given\n");
        usage();
        return 2;
    }
    if (server == NULL) return missing_setting("--server URL", "LAYERSYNC_SERVER");
    if (storage == NULL) return missing_setting("--storage DIR", "LAYERSYNC_STORAGE");
    if (jwt == NULL) return missing_setting("--jwt JWT", "LAYERSYNC_JWT");
    const char *command = argv[i];
    const char *arg = i + 1 < argc ? argv[i + 1] : NULL;

    struct app app;
    memset(&app, 0, sizeof app);
    pthread_mutex_init(&app.mutex, NULL);
    pthread_cond_init(&app.cond, NULL);

    layersync_client_options options;
    layersync_client_options_init(&options, LAYERSYNC_CLIENT_OPTIONS_VERSION);
    options.server_url = server;
    options.storage_path = storage;
    options.sync_delay_s = LAYERSYNC_SYNC_DISABLED; /* this tool syncs only when asked */

    layersync_client_delegate delegate = LAYERSYNC_CLIENT_DELEGATE_INIT;
    delegate.context = &app;
    delegate.server_did_validate = on_validate;
    delegate.did_finish_download = on_finish_download;
    delegate.did_fail_download = on_fail_download;
    delegate.did_finish_sync = on_finish_sync;
    delegate.did_fail_sync = on_fail_sync;
    delegate.did_receive_changes = on_receive_changes;
    delegate.did_fail_authentication = on_fail_authentication;

    layersync_client *client = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    if (layersync_client_create(&options, &delegate, &client, &error) != LAYERSYNC_OK) return fail("client", &error);
    layersync_document *document = NULL;
    int rc = 0;
    if (layersync_client_document_for_jwt(client, jwt, &document, &error) != LAYERSYNC_OK) {
        rc = fail("jwt", &error);
        layersync_error_clear(&error);
    } else if (strcmp(command, "download") == 0) {
        rc = layersync_document_is_downloaded(document) ? 0 : download(&app, document);
        char *path = NULL;
        if (rc == 0 && layersync_document_pdf_path(document, &path, &error) == LAYERSYNC_OK) printf("%s\n", path);
        layersync_free(path);
        layersync_error_clear(&error);
    } else {
        if (!layersync_document_is_downloaded(document)) rc = download(&app, document);
        if (rc != 0) {
        } else if (strcmp(command, "list") == 0) {
            rc = list(document, arg);
        } else if (strcmp(command, "add") == 0 && arg != NULL) {
            rc = add(document, arg);
        } else if (strcmp(command, "sync") == 0) {
            rc = sync_now(&app, document);
        } else if (strcmp(command, "listen") == 0) {
            rc = listen_changes(&app, document, arg ? atoi(arg) : 0);
        } else {
            usage();
            rc = 2;
        }
    }
    /* Blocks until queued callbacks have run; never call it from a callback. */
    if (layersync_client_destroy(client, &error) != LAYERSYNC_OK) rc = fail("destroy", &error);
    pthread_cond_destroy(&app.cond);
    pthread_mutex_destroy(&app.mutex);
    return rc;
}
