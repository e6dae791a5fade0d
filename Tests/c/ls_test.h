/* A small harness for the C tests of LayerSync's ABI (one executable per test, run by CTest).
 *
 * - CHECK / CHECK_MSG / CHECK_RC fail the test with file:line, the error code's name and the
 *   library's message; a failure kills the servers the test started and exits 1, even from a
 *   callback thread.
 * - ls_server_*: the REAL reference server (`layersync-server`) on loopback, port 0, its own
 *   keys, SQLite file and admin token; plus mint-token and upload.
 * - ls_events: a client delegate whose callbacks record into a struct guarded by a mutex and
 *   a condition variable; LS_WAIT(ev, timeout_ms, condition) waits for a condition over it
 *   with a deadline (no sleeps as assertions). Its per-document callbacks and counters are
 *   generated from api/layersync.toml (ls_events.generated.{h,c}); ls_test.c records their
 *   payloads.
 *
 * Configuration comes from compile definitions set by Tests/c/CMakeLists.txt, each
 * overridable by the environment variable of the same name:
 *   LAYERSYNC_SERVER_BIN   layersync-server executable
 *   LAYERSYNC_CORPUS_DIR   directory of the corpus PDFs
 *   LAYERSYNC_TEST_TMPDIR  where each test makes its temporary directories
 */
#ifndef LS_TEST_H
#define LS_TEST_H

#include "layersync.h"
#include "ls_events.generated.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

/* ---- Failing ---------------------------------------------------------------------------- */

#if defined(__GNUC__)
#define LS_NORETURN __attribute__((noreturn))
#define LS_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define LS_NORETURN
#define LS_PRINTF(f, a)
#endif

LS_NORETURN void ls_fail(const char *file, int line, const char *fmt, ...) LS_PRINTF(3, 4);
/* Reports rc/error as "CODE_NAME (n): message". */
const char *ls_describe(int rc, const layersync_error *error, char *buf, size_t size);

#define CHECK(cond)                                                                             \
    do {                                                                                        \
        if (!(cond)) ls_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond);                   \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                    \
    do {                                                                                        \
        if (!(cond)) ls_fail(__FILE__, __LINE__, __VA_ARGS__);                                  \
    } while (0)

/* Like CHECK_MSG, but records the failure and carries on (see ls_fail_later). */
#define CHECK_LATER(cond, ...)                                                                  \
    do {                                                                                        \
        if (!(cond)) ls_fail_later(__FILE__, __LINE__, __VA_ARGS__);                            \
    } while (0)

/* Evaluates `call` once; fails unless it returned `expected`. Also checks that a filled
 * error struct carries the same code as the return value. */
#define CHECK_RC(expected, call, errp)                                                          \
    do {                                                                                        \
        int ls_rc_ = (call);                                                                    \
        ls_check_rc(__FILE__, __LINE__, #call, (expected), ls_rc_, (errp));                     \
    } while (0)
#define CHECK_OK(call, errp) CHECK_RC(LAYERSYNC_OK, call, errp)

void ls_check_rc(const char *file, int line, const char *expr, int expected, int rc,
                 layersync_error *error);

/* Streq that prints both sides. */
#define CHECK_STREQ(a, b)                                                                       \
    do {                                                                                        \
        const char *ls_a_ = (a), *ls_b_ = (b);                                                  \
        if (ls_a_ == NULL || ls_b_ == NULL || strcmp(ls_a_, ls_b_) != 0)                        \
            ls_fail(__FILE__, __LINE__, "%s == %s failed: \"%s\" vs \"%s\"", #a, #b,           \
                    ls_a_ ? ls_a_ : "(null)", ls_b_ ? ls_b_ : "(null)");                        \
    } while (0)

/* Records a failure but lets the test go on (so that one broken guarantee does not hide the
 * others); ls_pass then fails the test. */
void ls_fail_later(const char *file, int line, const char *fmt, ...) LS_PRINTF(3, 4);

/* Ends the test: stops servers; if nothing failed (ls_fail_later) removes the temporary
 * directories, prints PASS and returns 0, else prints FAIL and returns 1. */
int ls_pass(const char *test_name);

/* ---- Files and processes ---------------------------------------------------------------- */

/* A new directory under LAYERSYNC_TEST_TMPDIR, removed by ls_pass. Returns a static-lifetime
 * string (owned by the harness). */
const char *ls_temp_dir(const char *label);
/* Absolute path of a corpus PDF (owned by the harness). Fails if it does not exist. */
const char *ls_corpus_pdf(const char *file_name);
/* Reads a whole file; *size receives its length. Caller frees. NULL if unreadable. */
unsigned char *ls_read_file(const char *path, size_t *size);
/* Runs argv (argv[0] a path) with stdout captured into *out (caller frees; may be NULL) and
 * stderr passed through. Returns the exit status, or -1 if it did not exit normally. */
int ls_run(char *const argv[], char **out);

/* ---- The reference server --------------------------------------------------------------- */

typedef struct ls_server {
    pid_t pid;
    char dir[1024];         /* keys, SQLite file, log */
    char url[256];          /* http://127.0.0.1:PORT */
    char private_key[1100];
    char log_path[1100];
} ls_server;

/* keygen + serve on 127.0.0.1 port 0; waits (30 s deadline) for the "listening on" line. */
void ls_server_start(ls_server *server);
/* SIGTERM, wait up to 10 s, then SIGKILL. Idempotent. */
void ls_server_stop(ls_server *server);
/* `mint-token`; layer/user_id may be NULL, expires_in_s <= 0 means the CLI's default.
 * Returns the JWT (caller frees). */
char *ls_server_mint_token(const ls_server *server, const char *document_id, const char *layer,
                           const char *user_id, int expires_in_s);
/* `upload FILE --document-id ID` through the admin API. */
void ls_server_upload(const ls_server *server, const char *pdf_path, const char *document_id);
/* A loopback URL on which nothing accepts connections (a bound, non-listening socket that
 * the harness keeps open, so the port cannot be reused meanwhile). */
const char *ls_closed_port_url(void);

/* ---- JWTs built offline (shape only; unsigned) ------------------------------------------ */

/* "<header>.<base64url(payload_json)>.<signature>"; caller frees. */
char *ls_make_jwt(const char *payload_json);
/* base64url without padding of size bytes; caller frees. */
char *ls_base64url(const unsigned char *data, size_t size);

/* ---- Recording delegate ----------------------------------------------------------------- */

#define LS_MAX_STATES 256

typedef struct ls_events {
    uint32_t magic;                  /* checks the context pointer of each callback */
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    pthread_t caller_thread;         /* the test's thread: callbacks must not run on it */

    /* Thread checks over all callbacks. */
    int callbacks;                   /* total callbacks received */
    bool have_callback_thread;
    pthread_t callback_thread;       /* the thread of the first callback */
    bool callback_on_caller_thread;  /* some callback ran on caller_thread */
    bool callback_on_other_thread;   /* some callback ran on a thread != callback_thread */
    int in_callback;                 /* callbacks running right now */
    bool callbacks_overlapped;       /* two callbacks ran at the same time */
    bool bad_context;                /* a callback got another context pointer */

    int release_context;

    int server_did_validate;
    char *server_info_json;          /* copy, or NULL */
    int validate_error_code;         /* 0 when error was NULL */
    bool validate_inconsistent;      /* both or neither of info/error were given */

    /* One counter per per-document event, named after its callback field (did_finish_sync,
     * did_change_sync_state, ...; generated from api/layersync.toml, ls_events.generated.h). */
    LS_DOCUMENT_EVENT_COUNTERS

    /* What some of them carried. */
    int fail_download_code;          /* error->code of the last did_fail_download, -1 if NULL */
    int64_t progress_done;           /* last bytes_done */
    int64_t progress_total;          /* last bytes_total */
    bool progress_went_backwards;
    bool progress_over_total;
    int fail_sync_code;              /* error->code of the last did_fail_sync, -1 if NULL */
    layersync_document_state_t states[LS_MAX_STATES]; /* of each did_change_sync_state */
    char *received_changes[64];      /* copies of each did_receive_changes value */
    int reset_layer_code;            /* error->code of the last did_reset_layer, 0 if NULL */

    layersync_document *last_document; /* document of the last per-document callback */
    bool null_document;                /* a per-document callback got NULL */

    /* Optional hooks run (outside the mutex) at the end of the recorded callback. */
    void (*on_validate)(struct ls_events *events, const char *info, const layersync_error *err);
    void (*on_finish_sync)(struct ls_events *events, layersync_document *document);
    void *user;
} ls_events;

void ls_events_init(ls_events *events);
/* Frees copies; call after the client is destroyed. */
void ls_events_free(ls_events *events);
/* A delegate with every callback recording into `events` (context = events). */
layersync_client_delegate ls_events_delegate(ls_events *events);
/* Checks that every callback so far ran on one thread that is not the caller's, never two at
 * once, with a document where one is due; a violation is reported with ls_fail_later. */
void ls_events_check_threads(ls_events *events, const char *file, int line);
#define CHECK_CALLBACK_THREADS(ev) ls_events_check_threads((ev), __FILE__, __LINE__)

/* Deadline helpers for LS_WAIT. */
void ls_deadline(struct timespec *deadline, int timeout_ms);

/* Waits until `condition` (an expression over *ev, read under ev->mutex) is true, or fails the test
 * after timeout_ms. */
#define LS_WAIT(ev, timeout_ms, condition)                                                           \
    do {                                                                                        \
        struct timespec ls_deadline_;                                                           \
        int ls_wrc_ = 0;                                                                        \
        bool ls_ok_;                                                                            \
        ls_deadline(&ls_deadline_, (timeout_ms));                                               \
        pthread_mutex_lock(&(ev)->mutex);                                                       \
        while (!(condition) && ls_wrc_ != ETIMEDOUT)                                                 \
            ls_wrc_ = pthread_cond_timedwait(&(ev)->cond, &(ev)->mutex, &ls_deadline_);         \
        ls_ok_ = (condition);                                                                        \
        pthread_mutex_unlock(&(ev)->mutex);                                                     \
        if (!ls_ok_) ls_fail(__FILE__, __LINE__, "timed out after %d ms waiting for: %s",       \
                             (int)(timeout_ms), #condition);                                         \
    } while (0)

/* Reads a field of *ev under its mutex. */
#define LS_GET(ev, expr, out)                                                                   \
    do {                                                                                        \
        pthread_mutex_lock(&(ev)->mutex);                                                       \
        (out) = (expr);                                                                         \
        pthread_mutex_unlock(&(ev)->mutex);                                                     \
    } while (0)

/* ---- Client helpers --------------------------------------------------------------------- */

/* Options with defaults from layersync_client_options_init, automatic sync disabled. */
layersync_client_options ls_client_options(const char *server_url, const char *storage_path);
/* Creates a client with ls_events_delegate(events); fails the test on error. */
layersync_client *ls_client_create(const char *server_url, const char *storage_path,
                                   ls_events *events);
/* Creates a client from `options` (e.g. ls_client_options with a field changed) and
 * ls_events_delegate(events); fails the test on error. */
layersync_client *ls_client_create_with(const layersync_client_options *options, ls_events *events);
/* Destroys the client and checks release_context ran exactly once. */
void ls_client_destroy(layersync_client *client, ls_events *events);
/* document_for_jwt; fails the test on error. */
layersync_document *ls_document(layersync_client *client, const char *jwt);
/* Starts the download and waits (60 s) for did_finish_download; fails on did_fail_download. */
void ls_download(layersync_document *document, ls_events *events);

/* Starts a sync cycle and waits for its end; fails the test on did_fail_sync. */
void ls_sync(layersync_document *document, ls_events *events);

/* Completion of an asynchronous server call (history, rollback, restore, deleted list,
 * download_attachment): pass ls_on_result as the layersync_document_result_cb and the
 * ls_result as its context. Works with LS_WAIT/LS_GET like ls_events. */
typedef struct {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int calls;
    char *json;             /* the last result's JSON (owned), or NULL */
    int code;               /* the last error's code, 0 on success, -1 if both or neither came */
    bool on_caller_thread;  /* the last call ran on the thread that called ls_result_init */
    layersync_document *document;
    pthread_t caller;
} ls_result;

void ls_result_init(ls_result *result);
void ls_on_result(void *context, layersync_document *document, const char *json, const layersync_error *error);
/* Waits for exactly one call, off the caller's thread, for `document`; returns its JSON
 * (owned by result) or NULL with result->code set. */
const char *ls_result_wait(ls_result *result, layersync_document *document);

/* Creates a client on a new storage directory, waits for a successful server_did_validate,
 * gets the document for a token minted for (document_id, layer, user_id) and downloads it.
 * *out_jwt (optional) receives the token (caller frees). */
layersync_document *ls_open_downloaded(const ls_server *server, const char *document_id, const char *layer,
                                       const char *user_id, ls_events *events, layersync_client **out_client,
                                       char **out_jwt);

/* ---- JSON ------------------------------------------------------------------------------- */

/* Parses JSON or fails the test. Caller decrefs. */
json_t *ls_json_parse(const char *text, const char *what, const char *file, int line);
#define LS_JSON(text, what) ls_json_parse((text), (what), __FILE__, __LINE__)
/* Fails unless every member of `expected` is json_equal to the same member of `actual`
 * (actual may have more members: id, v, timestamps added by the engine). */
void ls_json_check_subset(const json_t *expected, const json_t *actual, const char *what,
                          const char *file, int line);
#define CHECK_JSON_SUBSET(expected, actual, what)                                               \
    ls_json_check_subset((expected), (actual), (what), __FILE__, __LINE__)

/* Test timeouts (ms). */
#define LS_TIMEOUT_MS 30000
#define LS_DOWNLOAD_TIMEOUT_MS 60000

#endif /* LS_TEST_H */
