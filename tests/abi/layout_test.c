/* ABI layout of the structs passed in (x86_64 / LP64), frozen at ABI version 1: structs are
 * only ever extended at the end (docs/architecture.md §6), so every offset below must stay as it
 * is. A new field goes after the last one, with its own assertion added here, and bumps the
 * struct's version (the library reads only the fields of the version a caller sets:
 * Sources/LayerSync/VersionedStruct.swift, Tests/c/test_struct_versions.c); moving, removing
 * or retyping a field fails this file (CTest abi.layout). */
#include <layersync.h>

#include <stddef.h>

#if defined(__x86_64__) && defined(__LP64__)
_Static_assert(offsetof(layersync_error, version) == 0, "layersync_error.version moved");
_Static_assert(offsetof(layersync_error, code) == 4, "layersync_error.code moved");
_Static_assert(offsetof(layersync_error, message) == 8, "layersync_error.message moved");
_Static_assert(offsetof(layersync_error, sqlite_extended_code) == 16, "layersync_error.sqlite_extended_code moved");
_Static_assert(offsetof(layersync_error, http_status) == 20, "layersync_error.http_status moved");
_Static_assert(offsetof(layersync_error, document_id) == 24, "layersync_error.document_id moved");
_Static_assert(offsetof(layersync_error, record_id) == 32, "layersync_error.record_id moved");
_Static_assert(offsetof(layersync_error, attachment_id) == 40, "layersync_error.attachment_id moved");
_Static_assert(offsetof(layersync_client_options, version) == 0, "layersync_client_options.version moved");
_Static_assert(offsetof(layersync_client_options, server_url) == 8, "layersync_client_options.server_url moved");
_Static_assert(offsetof(layersync_client_options, storage_path) == 16, "layersync_client_options.storage_path moved");
_Static_assert(offsetof(layersync_client_options, allow_insecure_http) == 24, "layersync_client_options.allow_insecure_http moved");
_Static_assert(offsetof(layersync_client_options, sync_delay_s) == 32, "layersync_client_options.sync_delay_s moved");
_Static_assert(offsetof(layersync_client_options, connect_timeout_s) == 40, "layersync_client_options.connect_timeout_s moved");
_Static_assert(offsetof(layersync_client_options, request_timeout_s) == 48, "layersync_client_options.request_timeout_s moved");
_Static_assert(offsetof(layersync_client_options, long_poll_wait_s) == 56, "layersync_client_options.long_poll_wait_s moved");
_Static_assert(offsetof(layersync_client_options, durability) == 60, "layersync_client_options.durability moved"); /* version 2 */
_Static_assert(offsetof(layersync_client_delegate, version) == 0, "layersync_client_delegate.version moved");
_Static_assert(offsetof(layersync_client_delegate, context) == 8, "layersync_client_delegate.context moved");
_Static_assert(offsetof(layersync_client_delegate, release_context) == 16, "layersync_client_delegate.release_context moved");
_Static_assert(offsetof(layersync_client_delegate, server_did_validate) == 24, "layersync_client_delegate.server_did_validate moved");
_Static_assert(offsetof(layersync_client_delegate, did_finish_download) == 32, "layersync_client_delegate.did_finish_download moved");
_Static_assert(offsetof(layersync_client_delegate, did_fail_download) == 40, "layersync_client_delegate.did_fail_download moved");
_Static_assert(offsetof(layersync_client_delegate, did_fail_authentication) == 48, "layersync_client_delegate.did_fail_authentication moved");
_Static_assert(offsetof(layersync_client_delegate, did_finish_reauthentication) == 56, "layersync_client_delegate.did_finish_reauthentication moved");
_Static_assert(offsetof(layersync_client_delegate, did_fail_reauthentication) == 64, "layersync_client_delegate.did_fail_reauthentication moved");
_Static_assert(offsetof(layersync_client_delegate, did_begin_sync) == 72, "layersync_client_delegate.did_begin_sync moved");
_Static_assert(offsetof(layersync_client_delegate, did_change_sync_state) == 80, "layersync_client_delegate.did_change_sync_state moved");
_Static_assert(offsetof(layersync_client_delegate, did_fail_sync) == 88, "layersync_client_delegate.did_fail_sync moved");
_Static_assert(offsetof(layersync_client_delegate, did_finish_sync) == 96, "layersync_client_delegate.did_finish_sync moved");
_Static_assert(offsetof(layersync_client_delegate, download_progress) == 104, "layersync_client_delegate.download_progress moved");
_Static_assert(offsetof(layersync_client_delegate, did_receive_changes) == 112, "layersync_client_delegate.did_receive_changes moved");
_Static_assert(offsetof(layersync_client_delegate, did_reject_changes) == 120, "layersync_client_delegate.did_reject_changes moved");
_Static_assert(offsetof(layersync_client_delegate, request_token) == 128, "layersync_client_delegate.request_token moved");
_Static_assert(offsetof(layersync_client_delegate, is_network_available) == 136, "layersync_client_delegate.is_network_available moved");
_Static_assert(offsetof(layersync_client_delegate, did_reset_layer) == 144, "layersync_client_delegate.did_reset_layer moved"); /* version 2 */
#endif

int main(void) { return 0; }
