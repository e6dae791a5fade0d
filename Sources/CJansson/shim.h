#pragma once
#include <jansson.h>
/* Swift cannot call variadic or macro-only jansson entry points; these wrap the ones we use. */
static inline void ls_json_decref(json_t *json) { json_decref(json); }
static inline json_t *ls_json_incref(json_t *json) { return json_incref(json); }
static inline int ls_json_typeof(const json_t *json) { return (int)json_typeof(json); }
