/* The example programs against the REAL server (issue 5):
 * - examples/c layersync-example: download, add, list, sync from one store; `listen` in a
 *   second process prints the change another store syncs, and stops cleanly on SIGINT;
 * - examples/cpp layersync-example-cpp: builds as C++17 and runs;
 * - examples/lua (LuaJIT FFI over the generated header): download, add, list, sync; the
 *   annotation it adds reaches the C example's store. Skipped (not failed) without luajit.
 * Paths come from compile definitions (Tests/c/CMakeLists.txt). */
#include "ls_test.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static const char NOTE[] = "{\"v\":2,\"type\":\"pspdfkit/note\",\"icon\":\"comment\",\"pageIndex\":0,\"bbox\":[1,2,30,40],"
                           "\"createdAt\":\"2025-01-01T00:00:00Z\",\"updatedAt\":\"2025-01-01T00:00:00Z\","
                           "\"text\":{\"format\":\"plain\",\"value\":\"from the C example\"}}";

/* Runs the C example with --server/--storage/--jwt and up to two more arguments. */
static int run_example(const ls_server *server, const char *storage, const char *jwt, const char *command,
                       const char *arg, char **out)
{
    char *argv[] = {LAYERSYNC_EXAMPLE_C, "--server", (char *)server->url, "--storage", (char *)storage, "--jwt",
                    (char *)jwt, (char *)command, (char *)arg, NULL};
    return ls_run(argv, out);
}

/* Reads from fd into buf (appending) until `needle` appears or timeout_ms passes. */
static bool read_until(int fd, char *buf, size_t size, const char *needle, int timeout_ms)
{
    struct timespec deadline, now;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    for (;;) {
        if (strstr(buf, needle) != NULL) return true;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left = (deadline.tv_sec - now.tv_sec) * 1000 + (deadline.tv_nsec - now.tv_nsec) / 1000000;
        if (left <= 0) return false;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)left) <= 0) continue;
        size_t len = strlen(buf);
        ssize_t n = read(fd, buf + len, size - len - 1);
        if (n <= 0) return strstr(buf, needle) != NULL;
        buf[len + (size_t)n] = '\0';
    }
}

static void test_c_example(const ls_server *server)
{
    char *alice = ls_server_mint_token(server, "doc-example", NULL, "alice", 0);
    char *bob = ls_server_mint_token(server, "doc-example", NULL, "bob", 0);
    const char *store_a = ls_temp_dir("example-a");
    const char *store_b = ls_temp_dir("example-b");
    char *out = NULL;

    CHECK_MSG(run_example(server, store_a, alice, "download", NULL, &out) == 0, "download failed: %s", out);
    CHECK_MSG(strstr(out, ".pdf") != NULL || strstr(out, "/") != NULL, "download printed no path: %s", out);
    free(out);
    CHECK_MSG(run_example(server, store_a, alice, "add", NOTE, &out) == 0, "add failed: %s", out);
    char id[128];
    snprintf(id, sizeof id, "%s", out);
    id[strcspn(id, "\n")] = '\0';
    CHECK_MSG(strlen(id) > 0, "add printed no id");
    free(out);
    CHECK_MSG(run_example(server, store_a, alice, "list", NULL, &out) == 0, "list failed: %s", out);
    CHECK_MSG(strstr(out, id) != NULL && strstr(out, "pspdfkit/note") != NULL, "list misses %s: %s", id, out);
    free(out);
    CHECK_MSG(run_example(server, store_a, alice, "sync", NULL, &out) == 0, "sync failed: %s", out);
    CHECK_MSG(strstr(out, "synced\n") != NULL, "sync printed: %s", out);
    free(out);

    /* The settings from the environment, named as in the Python CLI; a missing one is usage (2). */
    CHECK(setenv("LAYERSYNC_SERVER", server->url, 1) == 0 && setenv("LAYERSYNC_STORAGE", store_a, 1) == 0);
    char *env_list[] = {LAYERSYNC_EXAMPLE_C, "list", NULL};
    int rc = ls_run(env_list, &out);
    CHECK_MSG(rc == 2 && out[0] == '\0', "list without a JWT anywhere: status %d, printed %s", rc, out);
    free(out);
    CHECK(setenv("LAYERSYNC_JWT", alice, 1) == 0);
    rc = ls_run(env_list, &out);
    CHECK_MSG(rc == 0 && strstr(out, id) != NULL, "list from $LAYERSYNC_*: status %d, printed %s", rc, out);
    free(out);
    CHECK(unsetenv("LAYERSYNC_SERVER") == 0 && unsetenv("LAYERSYNC_STORAGE") == 0 && unsetenv("LAYERSYNC_JWT") == 0);

    /* bob's store downloads (and has alice's note), then listens in a child process. */
    CHECK_MSG(run_example(server, store_b, bob, "list", NULL, &out) == 0, "list (bob) failed: %s", out);
    CHECK_MSG(strstr(out, id) != NULL, "bob's first list misses %s: %s", id, out);
    free(out);
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        char *argv[] = {LAYERSYNC_EXAMPLE_C, "--server", (char *)server->url, "--storage", (char *)store_b,
                        "--jwt", bob, "listen", NULL};
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    static char buf[65536];
    buf[0] = '\0';
    CHECK_MSG(read_until(fds[0], buf, sizeof buf, "listening", LS_TIMEOUT_MS), "listen did not start: %s", buf);

    /* alice adds and syncs a second note; bob's listener prints it. */
    CHECK_MSG(run_example(server, store_a, alice, "add", NOTE, &out) == 0, "add 2 failed: %s", out);
    char id2[128];
    snprintf(id2, sizeof id2, "%s", out);
    id2[strcspn(id2, "\n")] = '\0';
    free(out);
    CHECK_MSG(run_example(server, store_a, alice, "sync", NULL, &out) == 0, "sync 2 failed: %s", out);
    free(out);
    char expected[256];
    snprintf(expected, sizeof expected, "created doc-example %s", id2);
    bool seen = read_until(fds[0], buf, sizeof buf, expected, LS_TIMEOUT_MS);
    kill(pid, SIGINT);
    bool stopped = read_until(fds[0], buf, sizeof buf, "stopped", LS_TIMEOUT_MS);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    CHECK_LATER(seen, "listener did not print '%s': %s", expected, buf);
    CHECK_LATER(stopped && WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "listener did not stop cleanly on SIGINT (status %d): %s", status, buf);
    free(alice);
    free(bob);
}

static void test_cpp_example(void)
{
    char *argv[] = {LAYERSYNC_EXAMPLE_CPP, (char *)ls_temp_dir("example-cpp"), NULL};
    char *out = NULL;
    int rc = ls_run(argv, &out);
    CHECK_MSG(rc == 0 && strstr(out, "NOT_DOWNLOADED") != NULL, "C++ example exit %d: %s", rc, out);
    free(out);
}

static void test_lua_example(const ls_server *server)
{
    if (access(LAYERSYNC_LUAJIT, X_OK) != 0) {
        printf("SKIP lua example: %s not found (apt-get install luajit)\n", LAYERSYNC_LUAJIT);
        return;
    }
    char *carol = ls_server_mint_token(server, "doc-example", NULL, "carol", 0);
    char *argv[] = {LAYERSYNC_LUAJIT, LAYERSYNC_EXAMPLE_LUA, LAYERSYNC_HEADER, LAYERSYNC_LIBRARY_PATH,
                    (char *)server->url, (char *)ls_temp_dir("example-lua"), carol, NULL};
    char *out = NULL;
    int rc = ls_run(argv, &out);
    CHECK_MSG(rc == 0 && strstr(out, "synced\nok\n") != NULL, "LuaJIT example exit %d: %s", rc, out);
    /* What LuaJIT synced reaches another store (the C example's). */
    const char *added = strstr(out, "added ");
    CHECK(added != NULL);
    char id[128];
    snprintf(id, sizeof id, "%s", added + 6);
    id[strcspn(id, "\n")] = '\0';
    free(out);
    char *dave = ls_server_mint_token(server, "doc-example", NULL, "dave", 0);
    CHECK_MSG(run_example(server, ls_temp_dir("example-d"), dave, "list", NULL, &out) == 0, "list failed: %s", out);
    CHECK_MSG(strstr(out, id) != NULL, "annotation %s added by LuaJIT not on the server: %s", id, out);
    free(out);
    free(carol);
    free(dave);
}

int main(void)
{
    ls_server server;
    ls_server_start(&server);
    ls_server_upload(&server, ls_corpus_pdf("pypdf-example.pdf"), "doc-example");
    test_cpp_example();
    test_c_example(&server);
    test_lua_example(&server);
    ls_server_stop(&server);
    return ls_pass("examples");
}
