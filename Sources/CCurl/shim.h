#pragma once
#include <curl/curl.h>
/* curl_easy_setopt / curl_easy_getinfo are variadic, which Swift cannot call.
   These typed wrappers are the only way the core sets options. */
static inline CURLcode ls_curl_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ls_curl_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ls_curl_setopt_str(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ls_curl_setopt_ptr(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ls_curl_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }
typedef size_t (*ls_curl_data_cb)(char *ptr, size_t size, size_t nmemb, void *userdata);
typedef int (*ls_curl_xferinfo_cb)(void *clientp, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow);
static inline CURLcode ls_curl_setopt_data_cb(CURL *h, CURLoption o, ls_curl_data_cb v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ls_curl_setopt_xferinfo_cb(CURL *h, ls_curl_xferinfo_cb v) { return curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, v); }
static inline CURLcode ls_curl_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode ls_curl_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode ls_curl_getinfo_double(CURL *h, CURLINFO i, double *v) { return curl_easy_getinfo(h, i, v); }
/* The first finished transfer reported by curl_multi_info_read (CURLMsg's anonymous union is
   awkward from Swift). Returns 1 and fills *easy and *result, or 0 if none. */
static inline int ls_curl_multi_done(CURLM *m, CURL **easy, CURLcode *result) {
    int queued = 0; CURLMsg *msg;
    while ((msg = curl_multi_info_read(m, &queued)) != NULL) {
        if (msg->msg == CURLMSG_DONE) { *easy = msg->easy_handle; *result = msg->data.result; return 1; }
    }
    return 0;
}
static inline CURLcode ls_curl_global_init_default(void) { return curl_global_init(CURL_GLOBAL_DEFAULT); }
