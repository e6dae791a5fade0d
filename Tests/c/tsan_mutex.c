/* ThreadSanitizer support for LAYERSYNC_SANITIZE=thread builds (never in a product build):
 * makes Synchronization.Mutex's contended path visible to TSan.
 *
 * Mutex.withLock is inlined into liblayersync, so its fast path (a compare-exchange with
 * acquire/release ordering on the handle's 32-bit word) is instrumented. When the lock is
 * contended, the inlined code calls _MutexHandle._lockSlow / _unlockSlow in the toolchain's
 * libswiftSynchronization.so, which is not instrumented: it spins and hands the lock over
 * with FUTEX_LOCK_PI / FUTEX_UNLOCK_PI, so TSan sees no release by the old owner and no
 * acquire by the new one, and reports the two critical sections as a data race (for
 * example DocumentDescriptor.publishState against scheduleAutoSync, both inside
 * mutableState.withLock).
 *
 * This file is linked into every program of a TSan build and preloaded into LuaJIT. Its
 * definitions of the slow paths come first in the global symbol scope, so liblayersync's
 * calls land here; they run the real ones and add the missing edge on the handle's address,
 * the same address the fast path's atomics use: __tsan_release before handing the lock
 * over, __tsan_acquire once it is ours.
 *
 * Swift calling convention: `self`, the address of the _MutexHandle, is passed in the
 * swiftself register, which is clang's swift_context parameter of a swiftcall function;
 * _lockSlow's UInt32 argument (the caller's thread id) is the ordinary first argument. The
 * names are the mangled names of these ABI-stable (@usableFromInline) methods in the
 * toolchain's Synchronization.swiftinterface; check_names() stops a program at start-up if
 * one of them is no longer there. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <sanitizer/tsan_interface.h>

#define LOCK_SLOW "$s15Synchronization12_MutexHandleV9_lockSlowyys6UInt32VF"
#define TRY_LOCK_SLOW "$s15Synchronization12_MutexHandleV12_tryLockSlowSbyF"
#define UNLOCK_SLOW "$s15Synchronization12_MutexHandleV11_unlockSlowyyF"

#define SWIFT_CC __attribute__((swiftcall))
#define SWIFT_SELF __attribute__((swift_context))

typedef SWIFT_CC void (*lock_slow_fn)(uint32_t self_id, void *SWIFT_SELF handle);
typedef SWIFT_CC bool (*try_lock_slow_fn)(void *SWIFT_SELF handle);
typedef SWIFT_CC void (*unlock_slow_fn)(void *SWIFT_SELF handle);

/* The real `name` in libswiftSynchronization.so, loaded by then as liblayersync's dependency.
 * (Not dlsym(RTLD_NEXT): LuaJIT dlopens liblayersync with RTLD_LOCAL, outside the global scope
 * that RTLD_NEXT searches.) */
static void *real(void **cache, const char *name)
{
    void *fn = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (fn == NULL) {
        void *library = dlopen("libswiftSynchronization.so", RTLD_LAZY | RTLD_NOLOAD);
        fn = library != NULL ? dlsym(library, name) : NULL;
        if (fn == NULL) {
            fprintf(stderr, "tsan_mutex: %s not found: %s\n", name, dlerror());
            abort();
        }
        __atomic_store_n(cache, fn, __ATOMIC_RELEASE);
    }
    return fn;
}

SWIFT_CC void layersync_tsan_lock_slow(uint32_t self_id, void *SWIFT_SELF handle) __asm__(LOCK_SLOW);
SWIFT_CC bool layersync_tsan_try_lock_slow(void *SWIFT_SELF handle) __asm__(TRY_LOCK_SLOW);
SWIFT_CC void layersync_tsan_unlock_slow(void *SWIFT_SELF handle) __asm__(UNLOCK_SLOW);

/* A toolchain that renamed the slow paths would bypass these definitions silently. */
__attribute__((constructor)) static void check_names(void)
{
    void *library = dlopen("libswiftSynchronization.so", RTLD_LAZY | RTLD_NOLOAD);
    if (library == NULL) return; /* LuaJIT: loaded later, with liblayersync */
    const char *names[] = {LOCK_SLOW, TRY_LOCK_SLOW, UNLOCK_SLOW};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (dlsym(library, names[i]) == NULL) {
            fprintf(stderr, "tsan_mutex: libswiftSynchronization.so has no %s\n", names[i]);
            abort();
        }
    }
}

SWIFT_CC void layersync_tsan_lock_slow(uint32_t self_id, void *SWIFT_SELF handle)
{
    static void *cache;
    ((lock_slow_fn)real(&cache, LOCK_SLOW))(self_id, handle);
    __tsan_acquire(handle);
}

SWIFT_CC bool layersync_tsan_try_lock_slow(void *SWIFT_SELF handle)
{
    static void *cache;
    bool locked = ((try_lock_slow_fn)real(&cache, TRY_LOCK_SLOW))(handle);
    if (locked) __tsan_acquire(handle);
    return locked;
}

SWIFT_CC void layersync_tsan_unlock_slow(void *SWIFT_SELF handle)
{
    static void *cache;
    __tsan_release(handle);
    ((unlock_slow_fn)real(&cache, UNLOCK_SLOW))(handle);
}
