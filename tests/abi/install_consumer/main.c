/* Consumer of an installed liblayersync: the header and the library agree. */
#include <layersync.h>

#include <stdio.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)

int main(void)
{
    const char *expected = STR(LAYERSYNC_VERSION_MAJOR) "." STR(LAYERSYNC_VERSION_MINOR) "." STR(
        LAYERSYNC_VERSION_PATCH);
    const char *version = layersync_version();
    if (version == NULL || strcmp(version, expected) != 0) {
        fprintf(stderr, "layersync_version() = %s, header says %s\n", version ? version : "(null)", expected);
        return 1;
    }
    if (layersync_abi_version() != LAYERSYNC_ABI_VERSION) {
        fprintf(stderr, "layersync_abi_version() = %d, header says %d\n", (int)layersync_abi_version(),
                LAYERSYNC_ABI_VERSION);
        return 1;
    }
    printf("layersync %s\n", version);
    return 0;
}
