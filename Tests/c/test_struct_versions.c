/* Versioned structs passed in by a host compiled against an older header (api/layersync.toml:
 * each struct's doc lists the fields of each version). The library must read, and
 * layersync_client_options_init write, only the fields of the version the host set:
 *
 * - layersync_client_options version 1 (no `durability`): init with version 1 writes nothing
 *   after `long_poll_wait_s`; create gets LAYERSYNC_DURABILITY_FULL even when the bytes where
 *   version 2 has `durability` hold LAYERSYNC_DURABILITY_NORMAL (on x86_64 they are version 1's
 *   tail padding, whatever the host's stack held). Version 2 with NORMAL is honoured, and a
 *   version this library does not know (0, 3, 99) is refused with INVALID_ARGUMENT.
 * - layersync_client_delegate version 1 (no `did_reset_layer`): create copies only its fields
 *   and the client reports through them; unknown versions are refused.
 *
 * Every old struct sits at the very end of a mapped page whose next page is PROT_NONE, so a
 * read or write past it kills the test with SIGSEGV. The durability a client got is observed
 * from outside: this executable defines fsync and fdatasync (exported, so they interpose the
 * libc functions that SQLite and the library call; each counts, then calls libc's), and a
 * FULL create must fsync while a NORMAL one must not (docs/durability.md). */
#include "ls_test.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define DOCUMENT_ID "doc-struct-versions"

/* ---- The version-1 layouts, as the version-1 header declared them --------------------------- */

typedef struct {
    uint32_t version;
    const char *server_url;
    const char *storage_path;
    bool allow_insecure_http;
    double sync_delay_s;
    double connect_timeout_s;
    double request_timeout_s;
    int32_t long_poll_wait_s;
} options_v1;

typedef struct {
    uint32_t version;
    void *context;
    layersync_release_context_cb release_context;
    layersync_server_did_validate_cb server_did_validate;
    layersync_document_cb did_finish_download;
    layersync_document_error_cb did_fail_download;
    layersync_document_error_cb did_fail_authentication;
    layersync_document_string_cb did_finish_reauthentication;
    layersync_document_error_cb did_fail_reauthentication;
    layersync_document_cb did_begin_sync;
    layersync_document_state_cb did_change_sync_state;
    layersync_document_error_cb did_fail_sync;
    layersync_document_cb did_finish_sync;
    layersync_download_progress_cb download_progress;
    layersync_document_string_cb did_receive_changes;
    layersync_document_string_cb did_reject_changes;
    layersync_document_cb request_token;
    layersync_is_network_available_cb is_network_available;
} delegate_v1;

/* Version 2 only appended fields: the version-1 ones keep their offsets. */
_Static_assert(offsetof(options_v1, long_poll_wait_s) == offsetof(layersync_client_options, long_poll_wait_s),
               "options v1 layout");
_Static_assert(offsetof(layersync_client_options, durability) >= offsetof(options_v1, long_poll_wait_s) + sizeof(int32_t),
               "durability comes after the version-1 fields");
_Static_assert(offsetof(delegate_v1, is_network_available) == offsetof(layersync_client_delegate, is_network_available),
               "delegate v1 layout");
_Static_assert(offsetof(layersync_client_delegate, did_reset_layer) == sizeof(delegate_v1),
               "did_reset_layer comes right after the version-1 table");
_Static_assert(LAYERSYNC_CLIENT_OPTIONS_VERSION == 2, "this test knows options versions 1 and 2");
_Static_assert(LAYERSYNC_CLIENT_DELEGATE_VERSION == 2, "this test knows delegate versions 1 and 2");

/* `size` bytes ending exactly where a PROT_NONE page begins (never unmapped: a test process). */
static void *at_page_end(size_t size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    CHECK(size <= page && size % sizeof(void *) == 0);
    char *pages = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(pages != MAP_FAILED);
    CHECK(mprotect(pages + page, page, PROT_NONE) == 0);
    return pages + page - size;
}

/* ---- Counting fsyncs ------------------------------------------------------------------------ */

static atomic_long syncs;
static int (*libc_fsync)(int);
static int (*libc_fdatasync)(int);
static pthread_once_t libc_once = PTHREAD_ONCE_INIT;

static void find_libc_syncs(void)
{
    void *symbol = dlsym(RTLD_NEXT, "fsync");
    memcpy(&libc_fsync, &symbol, sizeof symbol); /* POSIX: a data pointer converts to a function pointer */
    symbol = dlsym(RTLD_NEXT, "fdatasync");
    memcpy(&libc_fdatasync, &symbol, sizeof symbol);
}

int fsync(int fd)
{
    pthread_once(&libc_once, find_libc_syncs);
    atomic_fetch_add(&syncs, 1);
    return libc_fsync(fd);
}

int fdatasync(int fd)
{
    pthread_once(&libc_once, find_libc_syncs);
    atomic_fetch_add(&syncs, 1);
    return libc_fdatasync(fd);
}

/* Downloads the document with `client` and returns how many fsyncs three creates made. */
static long syncs_of_three_creates(layersync_client *client, ls_events *events, const char *jwt)
{
    layersync_document *document = ls_document(client, jwt);
    ls_download(document, events);
    long before = atomic_load(&syncs);
    for (int i = 0; i < 3; i++) {
        char *out = NULL;
        layersync_error error = LAYERSYNC_ERROR_INIT;
        CHECK_OK(layersync_document_create_annotation(document, "{\"type\":\"pspdfkit/note\",\"bbox\":[1,2,3,4],\"text\":{\"format\":\"plain\",\"value\":\"\"},\"icon\":\"comment\",\"pageIndex\":0,\"note\":\"v\"}",
                                                      &out, &error),
                 &error);
        layersync_free(out);
    }
    return atomic_load(&syncs) - before;
}

static layersync_client *create_client(const void *options, const void *delegate)
{
    layersync_client *client = NULL;
    layersync_error error = LAYERSYNC_ERROR_INIT;
    CHECK_OK(layersync_client_create(options, delegate, &client, &error), &error);
    CHECK(client != NULL);
    return client;
}

/* ---- layersync_client_options ---------------------------------------------------------------- */

static void check_options_init_v1(void)
{
    options_v1 *options = at_page_end(sizeof *options);
    memset(options, 0xAB, sizeof *options);
    CHECK_OK(layersync_client_options_init((layersync_client_options *)options, 1), NULL);
    CHECK(options->version == 1);
    CHECK(options->server_url == NULL && options->storage_path == NULL && !options->allow_insecure_http);
    CHECK(options->sync_delay_s == 1.0 && options->connect_timeout_s == 10.0 && options->request_timeout_s == 30.0);
    CHECK(options->long_poll_wait_s == 30);
    /* Nothing after the version-1 fields was written (x86_64: the tail padding where version 2
     * has `durability`; elsewhere the guard page). */
    const unsigned char *bytes = (const unsigned char *)options;
    for (size_t i = offsetof(options_v1, long_poll_wait_s) + sizeof(int32_t); i < sizeof *options; i++)
        CHECK_MSG(bytes[i] == 0xAB, "layersync_client_options_init(version 1) wrote byte %zu of the struct", i);

    layersync_client_options *current = at_page_end(sizeof *current);
    memset(current, 0xAB, sizeof *current);
    CHECK_OK(layersync_client_options_init(current, 2), NULL);
    CHECK(current->version == 2 && current->durability == LAYERSYNC_DURABILITY_FULL);
}

static void check_unknown_options_versions(void)
{
    const uint32_t unknown[] = {0, 3, 99};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        layersync_client_options *options = at_page_end(sizeof *options);
        memset(options, 0xAB, sizeof *options);
        CHECK_RC(LAYERSYNC_ERROR_INVALID_ARGUMENT, layersync_client_options_init(options, unknown[i]), NULL);

        *options = ls_client_options(ls_closed_port_url(), ls_temp_dir("struct-versions-unknown"));
        options->version = unknown[i];
        layersync_client *client = (layersync_client *)options; /* must be reset to NULL */
        layersync_error error = LAYERSYNC_ERROR_INIT;
        int rc = layersync_client_create(options, NULL, &client, &error);
        CHECK_MSG(rc == LAYERSYNC_ERROR_INVALID_ARGUMENT && error.code == rc, "options.version %u: rc %d (%s)",
                  unknown[i], rc, layersync_error_code_name(rc));
        CHECK(client == NULL);
        char expected[64];
        snprintf(expected, sizeof expected, "options.version %u is not supported", unknown[i]);
        CHECK_MSG(error.message && strstr(error.message, expected), "message: %s", error.message ? error.message : "(none)");
        layersync_error_clear(&error);
    }
}

/* A version-1 struct whose bytes after its fields read as LAYERSYNC_DURABILITY_NORMAL: FULL. */
static void check_options_v1_gets_full(const ls_server *server, const char *jwt)
{
    options_v1 *options = at_page_end(sizeof *options);
    memset(options, 0, sizeof *options);
    CHECK_OK(layersync_client_options_init((layersync_client_options *)options, 1), NULL);
    options->server_url = server->url;
    options->storage_path = ls_temp_dir("struct-versions-v1");
    options->sync_delay_s = LAYERSYNC_SYNC_DISABLED;
    size_t durability_at = offsetof(layersync_client_options, durability);
    if (durability_at + sizeof(int32_t) <= sizeof *options) {
        const int32_t normal = LAYERSYNC_DURABILITY_NORMAL;
        memcpy((char *)options + durability_at, &normal, sizeof normal);
    }

    ls_events events;
    ls_events_init(&events);
    layersync_client_delegate delegate = ls_events_delegate(&events);
    layersync_client *client = create_client(options, &delegate);
    long count = syncs_of_three_creates(client, &events, jwt);
    CHECK_MSG(count >= 3, "options version 1: 3 creates made %ld fsyncs; version 1 has no durability field and must get "
                          "LAYERSYNC_DURABILITY_FULL (one fsync per create)", count);
    ls_client_destroy(client, &events);
    ls_events_free(&events);
}

/* Version 2, NORMAL and FULL: the baseline that shows the fsync count tells them apart. */
static void check_options_v2(const ls_server *server, const char *jwt)
{
    const int32_t modes[] = {LAYERSYNC_DURABILITY_NORMAL, LAYERSYNC_DURABILITY_FULL};
    for (size_t i = 0; i < 2; i++) {
        layersync_client_options *options = at_page_end(sizeof *options);
        *options = ls_client_options(server->url, ls_temp_dir("struct-versions-v2"));
        CHECK(options->version == 2);
        options->durability = modes[i];
        ls_events events;
        ls_events_init(&events);
        layersync_client_delegate delegate = ls_events_delegate(&events);
        layersync_client *client = create_client(options, &delegate);
        long count = syncs_of_three_creates(client, &events, jwt);
        if (modes[i] == LAYERSYNC_DURABILITY_NORMAL)
            CHECK_MSG(count == 0, "options version 2, NORMAL: 3 creates made %ld fsyncs, expected none", count);
        else
            CHECK_MSG(count >= 3, "options version 2, FULL: 3 creates made %ld fsyncs, expected one each", count);
        ls_client_destroy(client, &events);
        ls_events_free(&events);
    }
}

/* ---- layersync_client_delegate --------------------------------------------------------------- */

static void check_delegate_v1(const ls_server *server, const char *jwt)
{
    ls_events events;
    ls_events_init(&events);
    layersync_client_delegate full = ls_events_delegate(&events);
    delegate_v1 *delegate = at_page_end(sizeof *delegate);
    memcpy(delegate, &full, sizeof *delegate);
    delegate->version = 1;

    layersync_client_options options = ls_client_options(server->url, ls_temp_dir("struct-versions-delegate-v1"));
    layersync_client *client = create_client(&options, delegate);
    /* The version-1 callbacks are the client's: validation and the download report through them. */
    LS_WAIT(&events, LS_TIMEOUT_MS, events.server_did_validate == 1);
    ls_download(ls_document(client, jwt), &events);
    CHECK_CALLBACK_THREADS(&events);
    ls_client_destroy(client, &events); /* release_context exactly once */
    ls_events_free(&events);
}

static void check_unknown_delegate_versions(void)
{
    const uint32_t unknown[] = {0, 3, 99};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        layersync_client_delegate *delegate = at_page_end(sizeof *delegate);
        memset(delegate, 0, sizeof *delegate);
        delegate->version = unknown[i];
        layersync_client_options options = ls_client_options(ls_closed_port_url(), ls_temp_dir("struct-versions-bad-delegate"));
        layersync_client *client = NULL;
        layersync_error error = LAYERSYNC_ERROR_INIT;
        int rc = layersync_client_create(&options, delegate, &client, &error);
        CHECK_MSG(rc == LAYERSYNC_ERROR_INVALID_ARGUMENT && error.code == rc, "delegate.version %u: rc %d (%s)",
                  unknown[i], rc, layersync_error_code_name(rc));
        CHECK(client == NULL);
        char expected[64];
        snprintf(expected, sizeof expected, "delegate.version %u is not supported", unknown[i]);
        CHECK_MSG(error.message && strstr(error.message, expected), "message: %s", error.message ? error.message : "(none)");
        layersync_error_clear(&error);
    }
}

/* With an argument, runs only the check of that name (to see one failure at a time). */
int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
#define RUN(name) (only == NULL || strcmp(only, name) == 0)
    if (RUN("options_init_v1")) check_options_init_v1();
    if (RUN("unknown_options_versions")) check_unknown_options_versions();
    if (RUN("unknown_delegate_versions")) check_unknown_delegate_versions();
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pdfjs-issue13447.pdf"), DOCUMENT_ID);
    char *jwt = ls_server_mint_token(&server, DOCUMENT_ID, NULL, "alice", 0);
    if (RUN("delegate_v1")) check_delegate_v1(&server, jwt);
    if (RUN("options_v2")) check_options_v2(&server, jwt);
    if (RUN("options_v1_full")) check_options_v1_gets_full(&server, jwt);
#undef RUN
    free(jwt);
    ls_server_stop(&server);
    return ls_pass("struct_versions");
}
