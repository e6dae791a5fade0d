/* Library functions: layersync_version, layersync_abi_version, layersync_error_code_name,
 * layersync_free (docs/architecture.md §5, §6). No server needed. */
#include "ls_test.h"

#define STR2(x) #x
#define STR(x) STR2(x)

static const struct {
    int code;
    const char *name;
} codes[] = {
    {LAYERSYNC_OK, "OK"},
    {LAYERSYNC_ERROR_UNKNOWN, "UNKNOWN"},
    {LAYERSYNC_ERROR_FEATURE_UNSUPPORTED, "FEATURE_UNSUPPORTED"},
    {LAYERSYNC_ERROR_INVALID_DOCUMENT, "INVALID_DOCUMENT"},
    {LAYERSYNC_ERROR_ACCESS_DENIED, "ACCESS_DENIED"},
    {LAYERSYNC_ERROR_ALREADY_DOWNLOADED, "ALREADY_DOWNLOADED"},
    {LAYERSYNC_ERROR_DATABASE_ACCESS_FAILED, "DATABASE_ACCESS_FAILED"},
    {LAYERSYNC_ERROR_COULD_NOT_WRITE_TO_DISK, "COULD_NOT_WRITE_TO_DISK"},
    {LAYERSYNC_ERROR_INVALID_URL, "INVALID_URL"},
    {LAYERSYNC_ERROR_UNMANAGED_DOCUMENT, "UNMANAGED_DOCUMENT"},
    {LAYERSYNC_ERROR_NO_SUCH_ANNOTATION, "NO_SUCH_ANNOTATION"},
    {LAYERSYNC_ERROR_UNMANAGED_ANNOTATION, "UNMANAGED_ANNOTATION"},
    {LAYERSYNC_ERROR_COULD_NOT_READ_FROM_DISK_CACHE, "COULD_NOT_READ_FROM_DISK_CACHE"},
    {LAYERSYNC_ERROR_COULD_NOT_REMOVE_DISK_CACHE_ENTRIES, "COULD_NOT_REMOVE_DISK_CACHE_ENTRIES"},
    {LAYERSYNC_ERROR_REQUEST_FAILED, "REQUEST_FAILED"},
    {LAYERSYNC_ERROR_INVALID_SERVER_DATA, "INVALID_SERVER_DATA"},
    {LAYERSYNC_ERROR_INVALID_REQUEST, "INVALID_REQUEST"},
    {LAYERSYNC_ERROR_PAYLOAD_LIMIT_EXCEEDED, "PAYLOAD_LIMIT_EXCEEDED"},
    {LAYERSYNC_ERROR_OLD_CLIENT, "OLD_CLIENT"},
    {LAYERSYNC_ERROR_OLD_SERVER, "OLD_SERVER"},
    {LAYERSYNC_ERROR_INVALID_JWT, "INVALID_JWT"},
    {LAYERSYNC_ERROR_USER_ID_MISMATCH, "USER_ID_MISMATCH"},
    {LAYERSYNC_ERROR_ATTACHMENT_NOT_LOADED, "ATTACHMENT_NOT_LOADED"},
    {LAYERSYNC_ERROR_NO_SUCH_ATTACHMENT, "NO_SUCH_ATTACHMENT"},
    {LAYERSYNC_ERROR_COULD_NOT_CREATE_ATTACHMENT, "COULD_NOT_CREATE_ATTACHMENT"},
    {LAYERSYNC_ERROR_ALREADY_AUTHENTICATING, "ALREADY_AUTHENTICATING"},
    {LAYERSYNC_ERROR_CONTENT_MIGRATION_NEEDED, "CONTENT_MIGRATION_NEEDED"},
    {LAYERSYNC_ERROR_PERFORMING_CONTENT_MIGRATION, "PERFORMING_CONTENT_MIGRATION"},
    {LAYERSYNC_ERROR_INVALID_JSON_STRUCTURE, "INVALID_JSON_STRUCTURE"},
    {LAYERSYNC_ERROR_INVALID_CUSTOM_DATA, "INVALID_CUSTOM_DATA"},
    {LAYERSYNC_ERROR_INVALID_ARGUMENT, "INVALID_ARGUMENT"},
    {LAYERSYNC_ERROR_CANCELLED, "CANCELLED"},
    {LAYERSYNC_ERROR_STORAGE_LOCKED, "STORAGE_LOCKED"},
    {LAYERSYNC_ERROR_SERVER_RESET, "SERVER_RESET"},
    {LAYERSYNC_ERROR_CONFLICT, "CONFLICT"},
    {LAYERSYNC_ERROR_NOT_DOWNLOADED, "NOT_DOWNLOADED"},
    {LAYERSYNC_ERROR_INVALID_STATE, "INVALID_STATE"},
    {LAYERSYNC_ERROR_FORBIDDEN, "FORBIDDEN"},
};

int main(void)
{
    /* Version: the header's macros, the library's string and api/layersync.toml agree. */
    const char *expected = STR(LAYERSYNC_VERSION_MAJOR) "." STR(LAYERSYNC_VERSION_MINOR) "." STR(
        LAYERSYNC_VERSION_PATCH);
    const char *version = layersync_version();
    CHECK_STREQ(version, expected);
    CHECK_STREQ(version, LAYERSYNC_EXPECTED_VERSION); /* from api/layersync.toml via CMake */
    CHECK(layersync_version() == version);            /* static storage */
    CHECK(layersync_abi_version() == LAYERSYNC_ABI_VERSION);
    CHECK(layersync_abi_version() == LAYERSYNC_EXPECTED_ABI_VERSION);

    /* Every code has its name without prefix; anything else is UNRECOGNIZED. */
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *name = layersync_error_code_name(codes[i].code);
        CHECK_MSG(name != NULL && strcmp(name, codes[i].name) == 0, "layersync_error_code_name(%d) = %s, expected %s",
                  codes[i].code, name ? name : "(null)", codes[i].name);
        CHECK(layersync_error_code_name(codes[i].code) == name); /* static storage */
    }
    const int unknown[] = {-1, 9, 15, 20, 999, 1008, 2000, INT32_MAX, INT32_MIN};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *name = layersync_error_code_name(unknown[i]);
        CHECK_MSG(name != NULL && strcmp(name, "UNRECOGNIZED") == 0, "layersync_error_code_name(%d) = %s", unknown[i],
                  name ? name : "(null)");
    }

    layersync_free(NULL); /* documented no-op */
    layersync_error_clear(NULL);
    return ls_pass("library");
}
