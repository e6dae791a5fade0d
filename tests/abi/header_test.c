/* Compiles the public header with strict warnings as C11 and as C++17 (docs/architecture.md §6).
 * Built by tests/abi/CMakeLists.txt with every available compiler; never linked. It uses
 * each struct's _INIT macro and the options/delegate types so that warnings about them
 * (missing initializers, pedantic enum/struct issues, C++ incompatibilities) fail the test. */
#include "layersync.h"
#include "layersync.h" /* include guard */

#ifdef __cplusplus
extern "C" {
#endif
int layersync_header_test(void);
#ifdef __cplusplus
}
#endif

static void release_context(void *context) { (void)context; }

static void on_state(void *context, layersync_document *document, layersync_document_state_t state)
{
    (void)context;
    (void)document;
    (void)state;
}

int layersync_header_test(void)
{
    layersync_error error = LAYERSYNC_ERROR_INIT;
    layersync_client_delegate delegate = LAYERSYNC_CLIENT_DELEGATE_INIT;
    layersync_client_options options;
    int (*create)(const layersync_client_options *, const layersync_client_delegate *,
                  layersync_client **, layersync_error *) = layersync_client_create;
    const char *(*version)(void) = layersync_version;
    layersync_document_state_t state = LAYERSYNC_DOCUMENT_STATE_CLEAN;
    layersync_error_code_t code = LAYERSYNC_ERROR_INVALID_ARGUMENT;

    delegate.release_context = release_context;
    delegate.did_change_sync_state = on_state;
    options.version = LAYERSYNC_CLIENT_OPTIONS_VERSION;
    options.sync_delay_s = LAYERSYNC_SYNC_DISABLED;
    (void)options;
    (void)create;
    (void)version;
    return (int)error.code + (int)delegate.version + (int)state + (int)code
        + LAYERSYNC_VERSION_MAJOR + LAYERSYNC_VERSION_MINOR + LAYERSYNC_VERSION_PATCH
        + LAYERSYNC_ABI_VERSION + LAYERSYNC_ERROR_VERSION + LAYERSYNC_CLIENT_DELEGATE_VERSION;
}
