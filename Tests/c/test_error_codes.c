/* Error codes that no other C test triggers (issue 5: every error code reachable from C has a
 * C test; tests/abi/check_error_codes.py keeps the list honest, docs/threading.md §7 names the
 * unreachable ones):
 * - a scripted fake server (a thread of this test on loopback) answers GET /sync/v1/info:
 *   OLD_CLIENT (protocol.min too new), OLD_SERVER (protocol.max too old), INVALID_SERVER_DATA
 *   (not an info object), INVALID_REQUEST (HTTP 400), UNKNOWN (HTTP 418), each reported by
 *   server_did_validate;
 * - the fake server accepts every other request and never answers: CANCELLED (a download
 *   cancelled by layersync_document_cancel_download), ALREADY_AUTHENTICATING (a second
 *   reauthenticate while the first one's request hangs); destroy with the reauthentication
 *   hanging returns at once (it cancels the request);
 * - COULD_NOT_READ_FROM_DISK_CACHE: a cached attachment that is a link to /proc/self/mem;
 * - FEATURE_UNSUPPORTED: a downloaded store opened through a fake server on the same port whose
 *   info lists no capabilities; annotation_history's result says so;
 * - against the real server: DATABASE_ACCESS_FAILED (the layer's SQLite file overwritten with
 *   garbage between two clients), COULD_NOT_REMOVE_DISK_CACHE_ENTRIES (a tree below the
 *   document's storage deeper than PATH_MAX). */
#include "ls_test.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- A fake server ------------------------------------------------------------------------ */

#define MAX_HELD 64

typedef struct fake_server {
    int listen_fd;
    char url[64];
    pthread_t thread;
    pthread_mutex_t mutex;
    int info_status;       /* HTTP status of GET /sync/v1/info */
    const char *info_body; /* its body */
    int held[MAX_HELD];    /* other requests: accepted, read, never answered */
    int held_count;
    int requests;
    bool stop;
} fake_server;

static void *fake_server_run(void *argument)
{
    fake_server *f = argument;
    for (;;) {
        struct pollfd p = {.fd = f->listen_fd, .events = POLLIN};
        int ready = poll(&p, 1, 50);
        pthread_mutex_lock(&f->mutex);
        bool stop = f->stop;
        pthread_mutex_unlock(&f->mutex);
        if (stop) return NULL;
        if (ready <= 0) continue;
        int fd = accept(f->listen_fd, NULL, NULL);
        if (fd < 0) continue;
        char request[8192];
        size_t used = 0;
        while (used < sizeof request - 1) { /* the request head */
            struct pollfd q = {.fd = fd, .events = POLLIN};
            if (poll(&q, 1, 2000) <= 0) break;
            ssize_t n = recv(fd, request + used, sizeof request - 1 - used, 0);
            if (n <= 0) break;
            used += (size_t)n;
            request[used] = '\0';
            if (strstr(request, "\r\n\r\n")) break;
        }
        request[used] = '\0';
        pthread_mutex_lock(&f->mutex);
        f->requests++;
        if (strncmp(request, "GET /sync/v1/info", 17) == 0) {
            char response[2048];
            int length = snprintf(response, sizeof response,
                                  "HTTP/1.1 %d Scripted\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                                  "Connection: close\r\n\r\n%s",
                                  f->info_status, strlen(f->info_body), f->info_body);
            pthread_mutex_unlock(&f->mutex);
            ssize_t sent = send(fd, response, (size_t)length, MSG_NOSIGNAL);
            (void)sent;
            close(fd);
        } else if (f->held_count < MAX_HELD) {
            f->held[f->held_count++] = fd;
            pthread_mutex_unlock(&f->mutex);
        } else {
            pthread_mutex_unlock(&f->mutex);
            close(fd);
        }
    }
}

/* port 0: any free port. */
static void fake_server_start_on(fake_server *f, int port)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mutex, NULL);
    f->info_status = 200;
    f->info_body = "{}";
    f->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(f->listen_fd >= 0);
    int one = 1;
    CHECK(setsockopt(f->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(f->listen_fd, (struct sockaddr *)&address, sizeof address) == 0);
    CHECK(listen(f->listen_fd, 16) == 0);
    socklen_t size = sizeof address;
    CHECK(getsockname(f->listen_fd, (struct sockaddr *)&address, &size) == 0);
    snprintf(f->url, sizeof f->url, "http://127.0.0.1:%d", ntohs(address.sin_port));
    CHECK(pthread_create(&f->thread, NULL, fake_server_run, f) == 0);
}

static void fake_server_start(fake_server *f) { fake_server_start_on(f, 0); }

static void fake_server_script(fake_server *f, int status, const char *body)
{
    pthread_mutex_lock(&f->mutex);
    f->info_status = status;
    f->info_body = body;
    pthread_mutex_unlock(&f->mutex);
}

static int fake_server_held(fake_server *f)
{
    pthread_mutex_lock(&f->mutex);
    int held = f->held_count;
    pthread_mutex_unlock(&f->mutex);
    return held;
}

static void wait_held(fake_server *f, int count)
{
    struct timespec deadline, now;
    ls_deadline(&deadline, LS_TIMEOUT_MS);
    for (;;) {
        if (fake_server_held(f) >= count) return;
        clock_gettime(CLOCK_MONOTONIC, &now);
        CHECK_MSG(now.tv_sec < deadline.tv_sec, "only %d of %d requests reached the fake server", fake_server_held(f), count);
        usleep(10000);
    }
}

static void fake_server_stop(fake_server *f)
{
    pthread_mutex_lock(&f->mutex);
    f->stop = true;
    pthread_mutex_unlock(&f->mutex);
    pthread_join(f->thread, NULL);
    for (int i = 0; i < f->held_count; i++) close(f->held[i]);
    close(f->listen_fd);
    pthread_mutex_destroy(&f->mutex);
}

/* A client of the fake server; returns the code server_did_validate reported. */
static int validate_code(fake_server *f, int status, const char *body)
{
    fake_server_script(f, status, body);
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = ls_client_create(f->url, ls_temp_dir("client"), &events);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.server_did_validate >= 1);
    int code;
    LS_GET(&events, events.validate_error_code, code);
    ls_client_destroy(client, &events);
    ls_events_free(&events);
    return code;
}

#define CHECK_VALIDATE(expected, status, body)                                                       \
    do {                                                                                             \
        int code_ = validate_code(&fake, (status), (body));                                          \
        CHECK_LATER(code_ == (expected), "info %d %s: server_did_validate gave %s, expected %s", (status), (body), \
                    layersync_error_code_name(code_), layersync_error_code_name(expected));          \
    } while (0)

/* ---- Result callbacks ---------------------------------------------------------------------- */

typedef struct result {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int calls, code;
} result;

static void on_result(void *context, layersync_document *document, const char *json, const layersync_error *error)
{
    (void)document;
    (void)json;
    result *r = context;
    pthread_mutex_lock(&r->mutex);
    r->calls++;
    r->code = error ? error->code : 0;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->mutex);
}

/* ---- Files -------------------------------------------------------------------------------- */

static json_t *cache_entries(layersync_client *client)
{
    char *out = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_client_list_cache_entries(client, &out, &error), &error);
    json_t *json = LS_JSON(out, "list_cache_entries");
    layersync_free(out);
    return json;
}

/* The directory of the cache entry of `kind` for `document_id` (copied into `path`). */
static void entry_path(layersync_client *client, const char *document_id, const char *kind, char *path, size_t size)
{
    json_t *entries = cache_entries(client);
    size_t index;
    json_t *entry;
    path[0] = '\0';
    json_array_foreach(entries, index, entry)
    {
        if (strcmp(json_string_value(json_object_get(entry, "document_id")), document_id) == 0 &&
            strcmp(json_string_value(json_object_get(entry, "kind")), kind) == 0)
            snprintf(path, size, "%s", json_string_value(json_object_get(entry, "path")));
    }
    json_decref(entries);
    CHECK_MSG(path[0] != '\0', "no %s cache entry for %s", kind, document_id);
}

/* Overwrites every regular file below `dir` whose name contains ".sqlite" or ".db" with garbage. */
static int corrupt_databases(const char *dir)
{
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    int corrupted = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            corrupted += corrupt_databases(path);
        } else if (S_ISREG(st.st_mode)) {
            if (strstr(e->d_name, "-wal") || strstr(e->d_name, "-shm")) {
                unlink(path);
                continue;
            }
            FILE *file = fopen(path, "r+b");
            CHECK(file != NULL);
            char header[16] = {0};
            size_t got = fread(header, 1, sizeof header, file);
            if (got == 16 && memcmp(header, "SQLite format 3", 15) == 0) {
                rewind(file);
                for (int i = 0; i < 8192; i++) fputc('x', file);
                corrupted++;
            }
            fclose(file);
        }
    }
    closedir(d);
    return corrupted;
}

/* Creates `dir`/d/d/... until the path is longer than PATH_MAX (mkdirat, relative). */
static void make_deep_tree(const char *dir)
{
    char name[201];
    memset(name, 'd', 200);
    name[200] = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0);
    for (int depth = 0; depth < 24; depth++) { /* 24 * 201 > 4096 */
        CHECK(mkdirat(fd, name, 0700) == 0 || errno == EEXIST);
        int next = openat(fd, name, O_RDONLY | O_DIRECTORY);
        CHECK(next >= 0);
        close(fd);
        fd = next;
    }
    int file = openat(fd, "leaf", O_CREAT | O_WRONLY, 0600);
    CHECK(file >= 0);
    close(file);
    close(fd);
}

int main(void)
{
    /* 1. server_did_validate codes from a scripted /sync/v1/info. */
    fake_server fake;
    fake_server_start(&fake);
    CHECK_VALIDATE(LAYERSYNC_ERROR_OLD_CLIENT, 200, "{\"protocol\":{\"min\":99,\"max\":99}}");
    CHECK_VALIDATE(LAYERSYNC_ERROR_OLD_SERVER, 200, "{\"protocol\":{\"min\":0,\"max\":0}}");
    CHECK_VALIDATE(LAYERSYNC_ERROR_INVALID_SERVER_DATA, 200, "[\"not an info object\"]");
    CHECK_VALIDATE(LAYERSYNC_ERROR_INVALID_REQUEST, 400, "{\"error\":{\"code\":\"bad_request\",\"message\":\"scripted\"}}");
    CHECK_VALIDATE(LAYERSYNC_ERROR_UNKNOWN, 418, "{}");

    /* 2. Requests that hang: CANCELLED, ALREADY_AUTHENTICATING, then a clean destroy. */
    fake_server_script(&fake, 200, "{\"server_version\":\"fake\",\"protocol\":{\"min\":1,\"max\":1},\"capabilities\":[]}");
    ls_events events;
    ls_events_init(&events);
    layersync_client *client = ls_client_create(fake.url, ls_temp_dir("client"), &events);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.server_did_validate >= 1);
    int validate;
    LS_GET(&events, events.validate_error_code, validate);
    CHECK_MSG(validate == 0, "the fake server's info was refused: %s", layersync_error_code_name(validate));
    char *jwt = ls_make_jwt("{\"document_id\":\"doc-hang\",\"user_id\":\"alice\",\"exp\":4102444800}");
    layersync_document *document = ls_document(client, jwt);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_download(document, &error), &error);
    wait_held(&fake, 1);
    CHECK_OK(layersync_document_cancel_download(document, &error), &error);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.did_fail_download >= 1);
    int cancel_code;
    LS_GET(&events, events.fail_download_code, cancel_code);
    CHECK_LATER(cancel_code == LAYERSYNC_ERROR_CANCELLED, "cancelled download failed with %s",
                layersync_error_code_name(cancel_code));
    CHECK_OK(layersync_document_reauthenticate(document, jwt, &error), &error);
    CHECK_RC(LAYERSYNC_ERROR_ALREADY_AUTHENTICATING, layersync_document_reauthenticate(document, jwt, &error), &error);
    wait_held(&fake, 2); /* the reauthentication's request hangs too */
    /* Destroy with the reauthentication's request hanging cancels it (docs/threading.md §4.2)
     * instead of waiting out the request timeout (30 s). */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ls_client_destroy(client, &events);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double destroy_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    printf("destroy with a hanging reauthentication: %.0f ms\n", destroy_ms);
    CHECK_LATER(destroy_ms < 5000, "layersync_client_destroy took %.0f ms: it waited for the hanging reauthentication "
                "request instead of cancelling it", destroy_ms);
    ls_events_free(&events);
    free(jwt);
    fake_server_stop(&fake);

    /* 3. Local storage failures, against the real server. */
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-e");
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), "doc-f");
    ls_events_init(&events);
    char *jwt_e = NULL;
    document = ls_open_downloaded(&server, "doc-e", NULL, "alice", &events, &client, &jwt_e);
    char *jwt_f = ls_server_mint_token(&server, "doc-f", NULL, "alice", 0);
    ls_download(ls_document(client, jwt_f), &events);
    char storage[1024], layer_dir[2048], pdf_dir[2048];
    const char *storage_path = layersync_client_storage_path(client);
    CHECK(storage_path != NULL);
    snprintf(storage, sizeof storage, "%s", storage_path);
    entry_path(client, "doc-e", "layer", layer_dir, sizeof layer_dir);
    entry_path(client, "doc-f", "pdf", pdf_dir, sizeof pdf_dir);

    /* COULD_NOT_READ_FROM_DISK_CACHE: the cached attachment is a regular file that cannot be
     * read (a symbolic link to /proc/self/mem: open succeeds, read at offset 0 fails, EIO). */
    char *attachment_id = NULL;
    CHECK_OK(layersync_document_add_attachment(document, "abc", 3, "text/plain", &attachment_id, &error), &error);
    char attachment_path[2048];
    entry_path(client, "doc-e", "attachment", attachment_path, sizeof attachment_path);
    CHECK(strstr(attachment_path, attachment_id) != NULL);
    CHECK(unlink(attachment_path) == 0 && symlink("/proc/self/mem", attachment_path) == 0);
    layersync_attachment attachment = LAYERSYNC_ATTACHMENT_INIT;
    CHECK_RC(LAYERSYNC_ERROR_COULD_NOT_READ_FROM_DISK_CACHE,
             layersync_document_attachment_data(document, attachment_id, &attachment, &error), &error);
    layersync_free(attachment_id);

    /* COULD_NOT_REMOVE_DISK_CACHE_ENTRIES: a path below the document longer than PATH_MAX. */
    struct stat st;
    char deep_root[2100];
    snprintf(deep_root, sizeof deep_root, "%s", pdf_dir);
    if (stat(pdf_dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        char *slash = strrchr(deep_root, '/');
        if (slash) *slash = '\0';
    }
    make_deep_tree(deep_root);
    CHECK_RC(LAYERSYNC_ERROR_COULD_NOT_REMOVE_DISK_CACHE_ENTRIES,
             layersync_client_remove_local_storage_for_document(client, "doc-f", &error), &error);
    ls_client_destroy(client, &events);
    ls_events_free(&events);

    /* FEATURE_UNSUPPORTED: the same downloaded store (kept per server URL), through a server on
     * the real server's port whose info lists no capabilities; history is refused before any
     * request. */
    ls_server_stop(&server);
    const char *port = strrchr(server.url, ':');
    CHECK(port != NULL);
    fake_server_start_on(&fake, atoi(port + 1));
    fake_server_script(&fake, 200, "{\"server_version\":\"fake\",\"protocol\":{\"min\":1,\"max\":1},\"capabilities\":[]}");
    ls_events_init(&events);
    client = ls_client_create(server.url, storage, &events);
    LS_WAIT(&events, LS_TIMEOUT_MS, events.server_did_validate >= 1);
    LS_GET(&events, events.validate_error_code, validate);
    CHECK_MSG(validate == 0, "the fake server's info was refused: %s", layersync_error_code_name(validate));
    result history = {.calls = 0};
    pthread_mutex_init(&history.mutex, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&history.cond, &attr);
    pthread_condattr_destroy(&attr);
    CHECK_OK(layersync_document_annotation_history(ls_document(client, jwt_e), "01HZZZZZZZZZZZZZZZZZZZZZZZ", on_result,
                                                   &history, &error),
             &error);
    LS_WAIT(&history, LS_TIMEOUT_MS, history.calls == 1);
    CHECK_LATER(history.code == LAYERSYNC_ERROR_FEATURE_UNSUPPORTED, "history without the capability: %s",
                layersync_error_code_name(history.code));
    ls_client_destroy(client, &events);
    ls_events_free(&events);
    fake_server_stop(&fake);

    /* DATABASE_ACCESS_FAILED: the layer's store is not a database any more. */
    const char *layer_root = layer_dir;
    char parent[2048];
    if (stat(layer_dir, &st) == 0 && !S_ISDIR(st.st_mode)) { /* the entry is the file itself */
        snprintf(parent, sizeof parent, "%s", layer_dir);
        char *slash = strrchr(parent, '/');
        if (slash) *slash = '\0';
        layer_root = parent;
    }
    CHECK_MSG(corrupt_databases(layer_root) >= 1, "no SQLite file below %s", layer_root);
    ls_events_init(&events);
    client = ls_client_create(server.url, storage, &events);
    layersync_document *broken = NULL;
    int rc = layersync_client_document_for_jwt(client, jwt_e, &broken, &error);
    CHECK_MSG(rc == LAYERSYNC_ERROR_DATABASE_ACCESS_FAILED && error.code == rc && broken == NULL,
              "document_for_jwt on a corrupt store: %s", layersync_error_code_name(rc));
    /* docs/architecture.md §5: DATABASE_ACCESS_FAILED carries the SQLite extended result code
     * (SQLITE_NOTADB = 26 here). */
    CHECK_LATER(error.sqlite_extended_code != 0, "DATABASE_ACCESS_FAILED without sqlite_extended_code (\"%s\")",
                error.message ? error.message : "");
    layersync_error_clear(&error);
    ls_client_destroy(client, &events);
    ls_events_free(&events);
    char *rm[] = {"/bin/rm", "-rf", storage, NULL}; /* nftw in ls_pass cannot descend past PATH_MAX */
    CHECK(ls_run(rm, NULL) == 0);
    free(jwt_f);
    free(jwt_e);
    return ls_pass("error_codes");
}
