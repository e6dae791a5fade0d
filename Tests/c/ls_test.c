/* The C test harness; see ls_test.h. */
#include "ls_test.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef LAYERSYNC_SERVER_BIN
#define LAYERSYNC_SERVER_BIN "layersync-server"
#endif
#ifndef LAYERSYNC_CORPUS_DIR
#define LAYERSYNC_CORPUS_DIR "../shared/corpus/pdf"
#endif
#ifndef LAYERSYNC_TEST_TMPDIR
#define LAYERSYNC_TEST_TMPDIR "/tmp"
#endif

#define LS_EVENTS_MAGIC 0x4c534556u /* "LSEV" */

/* ---- Registry of what to clean up ------------------------------------------------------- */

#define LS_MAX_SERVERS 8
#define LS_MAX_TEMP_DIRS 32

static pthread_mutex_t registry_mutex = PTHREAD_MUTEX_INITIALIZER;
static pid_t server_pids[LS_MAX_SERVERS];
static char *temp_dirs[LS_MAX_TEMP_DIRS];
static int temp_dir_count;
static char *corpus_paths[16];
static int corpus_path_count;
static char closed_url[64];
static int deferred_failures;

static const char *config(const char *env_name, const char *fallback)
{
    const char *value = getenv(env_name);
    return (value != NULL && value[0] != '\0') ? value : fallback;
}

static void register_server(pid_t pid)
{
    pthread_mutex_lock(&registry_mutex);
    for (int i = 0; i < LS_MAX_SERVERS; i++) {
        if (server_pids[i] == 0) {
            server_pids[i] = pid;
            break;
        }
    }
    pthread_mutex_unlock(&registry_mutex);
}

static void unregister_server(pid_t pid)
{
    pthread_mutex_lock(&registry_mutex);
    for (int i = 0; i < LS_MAX_SERVERS; i++)
        if (server_pids[i] == pid) server_pids[i] = 0;
    pthread_mutex_unlock(&registry_mutex);
}

/* ---- Failing ---------------------------------------------------------------------------- */

void ls_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    /* No locks here: we may be on a callback thread, possibly inside the registry lock. */
    for (int i = 0; i < LS_MAX_SERVERS; i++)
        if (server_pids[i] > 0) kill(server_pids[i], SIGKILL);
    for (int i = 0; i < temp_dir_count; i++)
        fprintf(stderr, "  (kept temporary directory %s)\n", temp_dirs[i]);
    fflush(stderr);
    fflush(stdout);
    _exit(1);
}

void ls_fail_later(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    pthread_mutex_lock(&registry_mutex);
    deferred_failures++;
    pthread_mutex_unlock(&registry_mutex);
}

const char *ls_describe(int rc, const layersync_error *error, char *buf, size_t size)
{
    const char *name = layersync_error_code_name(rc);
    if (error != NULL && error->code != 0) {
        snprintf(buf, size, "%s (%d); error.code %s (%d), message \"%s\", http %d, sqlite %d", name ? name : "?",
                 rc, layersync_error_code_name(error->code), (int)error->code,
                 error->message ? error->message : "(null)", (int)error->http_status,
                 (int)error->sqlite_extended_code);
    } else {
        snprintf(buf, size, "%s (%d)", name ? name : "?", rc);
    }
    return buf;
}

void ls_check_rc(const char *file, int line, const char *expr, int expected, int rc, layersync_error *error)
{
    char got[1024];
    if (rc != expected) {
        ls_fail(file, line, "%s returned %s, expected %s (%d)", expr, ls_describe(rc, error, got, sizeof got),
                layersync_error_code_name(expected), expected);
    }
    if (error != NULL) {
        if (rc != LAYERSYNC_OK && error->code != rc) {
            ls_fail(file, line, "%s returned %d but filled error.code %d (%s)", expr, rc, (int)error->code,
                    error->message ? error->message : "(null)");
        }
        if (rc != LAYERSYNC_OK && error->message == NULL) {
            ls_fail(file, line, "%s returned %s without an error message", expr,
                    layersync_error_code_name(rc));
        }
        layersync_error_clear(error);
    }
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

int ls_pass(const char *test_name)
{
    pthread_mutex_lock(&registry_mutex);
    pid_t pids[LS_MAX_SERVERS];
    memcpy(pids, server_pids, sizeof pids);
    pthread_mutex_unlock(&registry_mutex);
    for (int i = 0; i < LS_MAX_SERVERS; i++) {
        if (pids[i] > 0) {
            ls_server server;
            memset(&server, 0, sizeof server);
            server.pid = pids[i];
            ls_server_stop(&server);
        }
    }
    pthread_mutex_lock(&registry_mutex);
    int failures = deferred_failures;
    pthread_mutex_unlock(&registry_mutex);
    for (int i = 0; i < temp_dir_count; i++) {
        if (failures == 0)
            nftw(temp_dirs[i], remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        else
            fprintf(stderr, "  (kept temporary directory %s)\n", temp_dirs[i]);
        free(temp_dirs[i]);
    }
    temp_dir_count = 0;
    for (int i = 0; i < corpus_path_count; i++) free(corpus_paths[i]);
    corpus_path_count = 0;
    if (failures > 0) {
        printf("FAIL %s: %d failure(s) reported above\n", test_name, failures);
        fflush(stdout);
        return 1;
    }
    printf("PASS %s\n", test_name);
    fflush(stdout);
    return 0;
}

/* ---- Files and processes ---------------------------------------------------------------- */

static void mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0700);
            *p = '/';
        }
    }
    mkdir(buf, 0700);
}

const char *ls_temp_dir(const char *label)
{
    const char *base = config("LAYERSYNC_TEST_TMPDIR", LAYERSYNC_TEST_TMPDIR);
    char path[PATH_MAX];
    mkdir_p(base);
    snprintf(path, sizeof path, "%s/%s-XXXXXX", base, label);
    CHECK_MSG(mkdtemp(path) != NULL, "mkdtemp(%s) failed: %s", path, strerror(errno));
    CHECK(temp_dir_count < LS_MAX_TEMP_DIRS);
    char *copy = strdup(path);
    CHECK(copy != NULL);
    temp_dirs[temp_dir_count++] = copy;
    return copy;
}

const char *ls_corpus_pdf(const char *file_name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", config("LAYERSYNC_CORPUS_DIR", LAYERSYNC_CORPUS_DIR), file_name);
    CHECK_MSG(access(path, R_OK) == 0, "corpus PDF %s is not readable (configure with -DLAYERSYNC_SHARED_DIR=... or set LAYERSYNC_CORPUS_DIR): %s", path,
              strerror(errno));
    CHECK(corpus_path_count < 16);
    corpus_paths[corpus_path_count] = strdup(path);
    return corpus_paths[corpus_path_count++];
}

unsigned char *ls_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    size_t cap = 65536, len = 0;
    unsigned char *data = malloc(cap);
    for (;;) {
        if (len == cap) {
            cap *= 2;
            data = realloc(data, cap);
        }
        size_t n = fread(data + len, 1, cap - len, f);
        if (n == 0) break;
        len += n;
    }
    fclose(f);
    *size = len;
    return data;
}

int ls_run(char *const argv[], char **out)
{
    int fds[2];
    CHECK_MSG(pipe(fds) == 0, "pipe: %s", strerror(errno));
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK_MSG(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], argv);
        fprintf(stderr, "execv %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 1 >= cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
        ssize_t n = read(fds[0], buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (out != NULL)
        *out = buf;
    else
        free(buf);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static const char *server_bin(void)
{
    const char *bin = config("LAYERSYNC_SERVER_BIN", LAYERSYNC_SERVER_BIN);
    CHECK_MSG(access(bin, X_OK) == 0,
              "layersync-server not executable at %s (run scripts/setup.sh or set LAYERSYNC_SERVER_BIN): %s", bin,
              strerror(errno));
    return bin;
}

/* ---- The reference server --------------------------------------------------------------- */

void ls_server_start(ls_server *server)
{
    const char *bin = server_bin();
    memset(server, 0, sizeof *server);
    snprintf(server->dir, sizeof server->dir, "%s", ls_temp_dir("server"));
    snprintf(server->private_key, sizeof server->private_key, "%s/private.pem", server->dir);
    snprintf(server->log_path, sizeof server->log_path, "%s/server.log", server->dir);

    char *keygen[] = {(char *)bin, "keygen", "--out", server->dir, NULL};
    int status = ls_run(keygen, NULL);
    CHECK_MSG(status == 0, "layersync-server keygen --out %s exited with %d", server->dir, status);

    char db[1100], public_key[1100];
    snprintf(db, sizeof db, "%s/s.sqlite", server->dir);
    snprintf(public_key, sizeof public_key, "%s/public.pem", server->dir);
    char *serve[] = {(char *)bin, "serve", "--host", "127.0.0.1", "--port", "0", "--db", db, "--public-key",
                     public_key, "--admin-token", "secret", NULL};

    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    CHECK_MSG(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a crashed or killed test */
        if (getppid() != parent) _exit(126);
        int log = open(server->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (log >= 0) {
            dup2(log, STDOUT_FILENO);
            dup2(log, STDERR_FILENO);
            close(log);
        }
        execv(serve[0], serve);
        _exit(127);
    }
    server->pid = pid;
    register_server(pid);

    /* Wait for the ready line, with a deadline; fail early if the server exits. */
    const char *ready = "layersync-server listening on ";
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        size_t size = 0;
        char *log = (char *)ls_read_file(server->log_path, &size);
        if (log != NULL) {
            log = realloc(log, size + 1);
            log[size] = '\0';
            char *line = strstr(log, ready);
            if (line != NULL && strchr(line, '\n') != NULL) {
                line += strlen(ready);
                size_t n = strcspn(line, " \r\n");
                CHECK(n > 0 && n < sizeof server->url);
                memcpy(server->url, line, n);
                server->url[n] = '\0';
                free(log);
                return;
            }
        }
        int wstatus;
        if (waitpid(pid, &wstatus, WNOHANG) == pid) {
            server->pid = 0;
            unregister_server(pid);
            ls_fail(__FILE__, __LINE__, "layersync-server serve exited (status %d) before listening:\n%s", wstatus,
                    log ? log : "");
        }
        free(log);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > 30)
            ls_fail(__FILE__, __LINE__, "layersync-server did not print '%s' within 30 s (log %s)", ready,
                    server->log_path);
        struct timespec poll_interval = {0, 20 * 1000 * 1000};
        nanosleep(&poll_interval, NULL);
    }
}

void ls_server_stop(ls_server *server)
{
    if (server->pid <= 0) return;
    pid_t pid = server->pid;
    kill(pid, SIGTERM);
    for (int i = 0; i < 500; i++) { /* 10 s */
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            server->pid = 0;
            unregister_server(pid);
            return;
        }
        struct timespec poll_interval = {0, 20 * 1000 * 1000};
        nanosleep(&poll_interval, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    server->pid = 0;
    unregister_server(pid);
}

char *ls_server_mint_token(const ls_server *server, const char *document_id, const char *layer,
                           const char *user_id, int expires_in_s)
{
    char expires[32];
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)server_bin();
    argv[n++] = "mint-token";
    argv[n++] = "--private-key";
    argv[n++] = (char *)server->private_key;
    argv[n++] = "--document-id";
    argv[n++] = (char *)document_id;
    if (layer != NULL) {
        argv[n++] = "--layer";
        argv[n++] = (char *)layer;
    }
    if (user_id != NULL) {
        argv[n++] = "--user-id";
        argv[n++] = (char *)user_id;
    }
    if (expires_in_s > 0) {
        snprintf(expires, sizeof expires, "%d", expires_in_s);
        argv[n++] = "--expires-in";
        argv[n++] = expires;
    }
    argv[n] = NULL;
    char *out = NULL;
    int status = ls_run(argv, &out);
    CHECK_MSG(status == 0, "layersync-server mint-token exited with %d", status);
    out[strcspn(out, " \r\n")] = '\0';
    CHECK_MSG(strlen(out) > 10 && strchr(out, '.') != NULL, "mint-token printed no JWT: '%s'", out);
    return out;
}

void ls_server_upload(const ls_server *server, const char *pdf_path, const char *document_id)
{
    char *argv[] = {(char *)server_bin(), "upload", "--url", (char *)server->url, "--admin-token", "secret",
                    (char *)pdf_path, "--document-id", (char *)document_id, NULL};
    char *out = NULL;
    int status = ls_run(argv, &out);
    CHECK_MSG(status == 0, "layersync-server upload %s exited with %d: %s", pdf_path, status, out);
    free(out);
}

const char *ls_closed_port_url(void)
{
    if (closed_url[0] != '\0') return closed_url;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    CHECK(bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0);
    socklen_t len = sizeof addr;
    CHECK(getsockname(fd, (struct sockaddr *)&addr, &len) == 0);
    /* Bound but never listening: connects get ECONNREFUSED; fd stays open for the test. */
    snprintf(closed_url, sizeof closed_url, "http://127.0.0.1:%u", (unsigned)ntohs(addr.sin_port));
    return closed_url;
}

/* ---- JWTs ------------------------------------------------------------------------------- */

char *ls_base64url(const unsigned char *data, size_t size)
{
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    char *out = malloc(size * 4 / 3 + 4);
    size_t o = 0;
    for (size_t i = 0; i < size; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16;
        if (i + 1 < size) v |= (uint32_t)data[i + 1] << 8;
        if (i + 2 < size) v |= data[i + 2];
        out[o++] = alphabet[(v >> 18) & 63];
        out[o++] = alphabet[(v >> 12) & 63];
        if (i + 1 < size) out[o++] = alphabet[(v >> 6) & 63];
        if (i + 2 < size) out[o++] = alphabet[v & 63];
    }
    out[o] = '\0';
    return out;
}

char *ls_make_jwt(const char *payload_json)
{
    const char *header = "{\"alg\":\"ES256\",\"typ\":\"JWT\"}";
    char *h = ls_base64url((const unsigned char *)header, strlen(header));
    char *p = ls_base64url((const unsigned char *)payload_json, strlen(payload_json));
    const char *signature = "c2lnbmF0dXJlLW5vdC1jaGVja2VkLW9mZmxpbmU";
    size_t n = strlen(h) + strlen(p) + strlen(signature) + 3;
    char *jwt = malloc(n);
    snprintf(jwt, n, "%s.%s.%s", h, p, signature);
    free(h);
    free(p);
    return jwt;
}

/* ---- Recording delegate ----------------------------------------------------------------- */

static pthread_mutex_t ls_publish_mutex = PTHREAD_MUTEX_INITIALIZER;

void ls_events_init(ls_events *events)
{
    memset(events, 0, sizeof *events);
    pthread_mutex_init(&events->mutex, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&events->cond, &attr);
    pthread_condattr_destroy(&attr);
    events->caller_thread = pthread_self();
    events->magic = LS_EVENTS_MAGIC;
    pthread_mutex_lock(&ls_publish_mutex); /* see enter() */
    pthread_mutex_unlock(&ls_publish_mutex);
}

void ls_events_free(ls_events *events)
{
    pthread_mutex_lock(&events->mutex);
    free(events->server_info_json);
    events->server_info_json = NULL;
    for (int i = 0; i < 64; i++) {
        free(events->received_changes[i]);
        events->received_changes[i] = NULL;
    }
    pthread_mutex_unlock(&events->mutex);
}

void ls_deadline(struct timespec *deadline, int timeout_ms)
{
    clock_gettime(CLOCK_MONOTONIC, deadline);
    deadline->tv_sec += timeout_ms / 1000;
    deadline->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline->tv_nsec >= 1000000000L) {
        deadline->tv_sec += 1;
        deadline->tv_nsec -= 1000000000L;
    }
}

/* Locks and records the thread; returns the events with the mutex held. */
static ls_events *enter(void *context)
{
    ls_events *ev = context;
    if (ev == NULL) ls_fail(__FILE__, __LINE__, "callback got a NULL context");
    /* The library hands the context to its callback thread through Dispatch, which
     * ThreadSanitizer cannot see (it is not instrumented); ls_publish_mutex (static, so never
     * racing with its own initialisation) carries the happens-before edge from
     * ls_events_init to here. Plain C needs no such thing: the library's hand-off already
     * orders them. */
    pthread_mutex_lock(&ls_publish_mutex);
    pthread_mutex_unlock(&ls_publish_mutex);
    pthread_mutex_lock(&ev->mutex);
    if (ev->magic != LS_EVENTS_MAGIC)
        ls_fail(__FILE__, __LINE__, "callback got context %p, not the delegate's context", context);
    pthread_t self = pthread_self();
    ev->callbacks++;
    if (pthread_equal(self, ev->caller_thread)) ev->callback_on_caller_thread = true;
    if (!ev->have_callback_thread) {
        ev->have_callback_thread = true;
        ev->callback_thread = self;
    } else if (!pthread_equal(self, ev->callback_thread)) {
        ev->callback_on_other_thread = true;
    }
    if (ev->in_callback > 0) ev->callbacks_overlapped = true;
    ev->in_callback++;
    return ev;
}

/* Broadcasts, unlocks, and marks the callback finished once the hook (if any) ran. */
static void leave_locked(ls_events *ev)
{
    pthread_cond_broadcast(&ev->cond);
    pthread_mutex_unlock(&ev->mutex);
}

static void done(ls_events *ev)
{
    pthread_mutex_lock(&ev->mutex);
    ev->in_callback--;
    pthread_cond_broadcast(&ev->cond);
    pthread_mutex_unlock(&ev->mutex);
}

static void on_release_context(void *context)
{
    ls_events *ev = context;
    if (ev == NULL || ev->magic != LS_EVENTS_MAGIC)
        ls_fail(__FILE__, __LINE__, "release_context got context %p", context);
    pthread_mutex_lock(&ev->mutex);
    ev->release_context++;
    pthread_cond_broadcast(&ev->cond);
    pthread_mutex_unlock(&ev->mutex);
}

static void on_server_did_validate(void *context, const char *info, const layersync_error *error)
{
    ls_events *ev = enter(context);
    ev->server_did_validate++;
    if ((info == NULL) == (error == NULL)) ev->validate_inconsistent = true;
    free(ev->server_info_json);
    ev->server_info_json = info ? strdup(info) : NULL;
    ev->validate_error_code = error ? error->code : 0;
    leave_locked(ev);
    if (ev->on_validate) ev->on_validate(ev, info, error);
    done(ev);
}

/* The per-document callbacks are generated (ls_events.generated.c); these are the steps they
 * share and what they record beyond their counter, by payload. Each record function runs with
 * the mutex held, before the event's counter is incremented. */

ls_events *ls_events_enter_document(void *context, layersync_document *document)
{
    ls_events *ev = enter(context);
    if (document == NULL) ev->null_document = true;
    ev->last_document = document;
    return ev;
}

void ls_events_leave_document(ls_events *ev, ls_document_event event, layersync_document *document)
{
    leave_locked(ev);
    if (event == LS_EVENT_DID_FINISH_SYNC && ev->on_finish_sync) ev->on_finish_sync(ev, document);
    done(ev);
}

static void log_error(ls_document_event event, const layersync_error *error)
{
    if (error)
        fprintf(stderr, "%s: %s (%d) %s\n", ls_document_event_names[event], layersync_error_code_name(error->code),
                (int)error->code, error->message ? error->message : "");
}

void ls_events_record_error(ls_events *ev, ls_document_event event, const layersync_error *error)
{
    switch (event) {
    case LS_EVENT_DID_FAIL_DOWNLOAD:
        ev->fail_download_code = error ? error->code : -1;
        log_error(event, error);
        break;
    case LS_EVENT_DID_FAIL_SYNC:
        ev->fail_sync_code = error ? error->code : -1;
        log_error(event, error);
        break;
    case LS_EVENT_DID_RESET_LAYER:
        ev->reset_layer_code = error ? error->code : 0;
        break;
    default: /* counted only */
        break;
    }
}

void ls_events_record_string(ls_events *ev, ls_document_event event, const char *value)
{
    if (event == LS_EVENT_DID_RECEIVE_CHANGES && ev->did_receive_changes < 64)
        ev->received_changes[ev->did_receive_changes] = value ? strdup(value) : NULL;
}

void ls_events_record_state(ls_events *ev, ls_document_event event, layersync_document_state_t state)
{
    if (event == LS_EVENT_DID_CHANGE_SYNC_STATE && ev->did_change_sync_state < LS_MAX_STATES) ev->states[ev->did_change_sync_state] = state;
}

void ls_events_record_progress(ls_events *ev, ls_document_event event, int64_t done_bytes, int64_t total_bytes)
{
    if (event != LS_EVENT_DOWNLOAD_PROGRESS) return;
    if (ev->download_progress > 0 && done_bytes < ev->progress_done) ev->progress_went_backwards = true;
    if (total_bytes >= 0 && done_bytes > total_bytes) ev->progress_over_total = true;
    ev->progress_done = done_bytes;
    ev->progress_total = total_bytes;
}

layersync_client_delegate ls_events_delegate(ls_events *events)
{
    /* Field by field rather than LAYERSYNC_CLIENT_DELEGATE_INIT, so that the C tests do not
     * depend on that macro (tests/abi/header_test.c checks it). */
    layersync_client_delegate d;
    memset(&d, 0, sizeof d);
    d.version = LAYERSYNC_CLIENT_DELEGATE_VERSION;
    d.context = events;
    d.release_context = on_release_context;
    d.server_did_validate = on_server_did_validate;
    d.is_network_available = NULL;
    ls_events_set_document_callbacks(&d);
    return d;
}

void ls_events_check_threads(ls_events *ev, const char *file, int line)
{
    pthread_mutex_lock(&ev->mutex);
    int callbacks = ev->callbacks;
    bool on_caller = ev->callback_on_caller_thread, on_other = ev->callback_on_other_thread;
    bool overlapped = ev->callbacks_overlapped, null_document = ev->null_document;
    pthread_mutex_unlock(&ev->mutex);
    if (callbacks == 0) ls_fail_later(file, line, "no callback ran");
    if (on_caller) ls_fail_later(file, line, "a callback ran on the caller's thread (must be the client's own thread)");
    if (on_other)
        ls_fail_later(file, line, "callbacks of one client ran on more than one thread "
                                  "(docs/architecture.md §6: one serial background thread per client)");
    if (overlapped) ls_fail_later(file, line, "two callbacks of one client ran at the same time");
    if (null_document) ls_fail_later(file, line, "a per-document callback got a NULL document");
}

/* ---- Client helpers --------------------------------------------------------------------- */

layersync_client_options ls_client_options(const char *server_url, const char *storage_path)
{
    layersync_client_options options;
    memset(&options, 0xAB, sizeof options); /* init must set every field */
    int rc = layersync_client_options_init(&options, LAYERSYNC_CLIENT_OPTIONS_VERSION);
    CHECK_MSG(rc == LAYERSYNC_OK, "layersync_client_options_init returned %d", rc);
    options.server_url = server_url;
    options.storage_path = storage_path;
    options.sync_delay_s = LAYERSYNC_SYNC_DISABLED;
    return options;
}

layersync_client *ls_client_create(const char *server_url, const char *storage_path, ls_events *events)
{
    layersync_client_options options = ls_client_options(server_url, storage_path);
    return ls_client_create_with(&options, events);
}

layersync_client *ls_client_create_with(const layersync_client_options *options, ls_events *events)
{
    layersync_client_delegate delegate = ls_events_delegate(events);
    layersync_client *client = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_client_create(options, &delegate, &client, &error), &error);
    CHECK(client != NULL);
    return client;
}

void ls_client_destroy(layersync_client *client, ls_events *events)
{
    layersync_error error = LAYERSYNC_ERROR_INIT;
    int before;
    LS_GET(events, events->release_context, before);
    CHECK_MSG(before == 0, "release_context ran %d times before layersync_client_destroy", before);
    CHECK_OK(layersync_client_destroy(client, &error), &error);
    int after;
    LS_GET(events, events->release_context, after);
    CHECK_MSG(after == 1, "release_context ran %d times by the time layersync_client_destroy returned, expected 1",
              after);
}

layersync_document *ls_document(layersync_client *client, const char *jwt)
{
    layersync_document *document = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_client_document_for_jwt(client, jwt, &document, &error), &error);
    CHECK(document != NULL);
    return document;
}

void ls_download(layersync_document *document, ls_events *events)
{
    layersync_error error = LAYERSYNC_ERROR_INIT;
    int finished_before;
    LS_GET(events, events->did_finish_download, finished_before);
    CHECK_OK(layersync_document_download(document, &error), &error);
    LS_WAIT(events, LS_DOWNLOAD_TIMEOUT_MS,
            events->did_finish_download > finished_before || events->did_fail_download > 0);
    int failed, code;
    LS_GET(events, events->did_fail_download, failed);
    LS_GET(events, events->fail_download_code, code);
    CHECK_MSG(failed == 0, "did_fail_download: %s (%d)", layersync_error_code_name(code), code);
    CHECK(layersync_document_is_downloaded(document));
}

void ls_sync(layersync_document *document, ls_events *events)
{
    int finished, failed, failed_now;
    LS_GET(events, events->did_finish_sync, finished);
    LS_GET(events, events->did_fail_sync, failed);
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_document_sync(document, &error), &error);
    LS_WAIT(events, LS_TIMEOUT_MS, events->did_finish_sync > finished || events->did_fail_sync > failed);
    LS_GET(events, events->did_fail_sync, failed_now);
    CHECK_MSG(failed_now == failed, "sync failed");
}

/* Gives ThreadSanitizer a happens-before edge between ls_result_init and the callback
 * thread (the hand-off inside the uninstrumented library is invisible to it). */
static pthread_mutex_t result_publish_mutex = PTHREAD_MUTEX_INITIALIZER;

static void result_publish(void)
{
    pthread_mutex_lock(&result_publish_mutex);
    pthread_mutex_unlock(&result_publish_mutex);
}

void ls_result_init(ls_result *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mutex, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &attr);
    pthread_condattr_destroy(&attr);
    c->caller = pthread_self();
    result_publish();
}

void ls_on_result(void *context, layersync_document *document, const char *json, const layersync_error *error)
{
    ls_result *c = context;
    result_publish();
    pthread_mutex_lock(&c->mutex);
    c->calls++;
    c->document = document;
    c->on_caller_thread = pthread_equal(pthread_self(), c->caller);
    free(c->json);
    c->json = json ? strdup(json) : NULL;
    c->code = error ? error->code : 0;
    if ((json == NULL) == (error == NULL)) c->code = -1; /* exactly one of them */
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mutex);
}

const char *ls_result_wait(ls_result *c, layersync_document *document)
{
    LS_WAIT(c, LS_TIMEOUT_MS, c->calls >= 1);
    CHECK_MSG(c->calls == 1, "completion called %d times", c->calls);
    CHECK(!c->on_caller_thread && c->document == document);
    CHECK_MSG(c->code != -1, "completion got both or neither of result and error");
    return c->json;
}

layersync_document *ls_open_downloaded(const ls_server *server, const char *document_id, const char *layer,
                                       const char *user_id, ls_events *events, layersync_client **out_client,
                                       char **out_jwt)
{
    layersync_client *client = ls_client_create(server->url, ls_temp_dir("client"), events);
    LS_WAIT(events, LS_TIMEOUT_MS, events->server_did_validate >= 1);
    int code;
    LS_GET(events, events->validate_error_code, code);
    CHECK_MSG(code == 0, "server_did_validate against %s reported %s (%d)", server->url,
              layersync_error_code_name(code), code);
    char *jwt = ls_server_mint_token(server, document_id, layer, user_id, 0);
    layersync_document *document = ls_document(client, jwt);
    ls_download(document, events);
    if (out_jwt != NULL)
        *out_jwt = jwt;
    else
        free(jwt);
    *out_client = client;
    return document;
}

/* ---- JSON ------------------------------------------------------------------------------- */

json_t *ls_json_parse(const char *text, const char *what, const char *file, int line)
{
    if (text == NULL) ls_fail(file, line, "%s: NULL instead of JSON", what);
    json_error_t jerr;
    json_t *json = json_loads(text, JSON_ALLOW_NUL, &jerr);
    if (json == NULL) ls_fail(file, line, "%s is not JSON (%s at %d): %.500s", what, jerr.text, jerr.position, text);
    return json;
}

void ls_json_check_subset(const json_t *expected, const json_t *actual, const char *what, const char *file,
                          int line)
{
    if (!json_is_object(expected) || !json_is_object(actual)) ls_fail(file, line, "%s: not JSON objects", what);
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)expected, key, value)
    {
        json_t *got = json_object_get(actual, key);
        if (got == NULL || !json_equal(value, got)) {
            char *want_s = json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT);
            char *got_s = got ? json_dumps(got, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
            ls_fail(file, line, "%s: member \"%s\" differs: expected %s, got %s", what, key, want_s,
                    got_s ? got_s : "(missing)");
        }
    }
}
