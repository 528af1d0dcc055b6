#pragma once
#include <curl/curl.h>

// curl_easy_setopt and curl_easy_getinfo are variadic, which Swift does not call: one
// typed wrapper per kind of value the mail sender passes.
static inline CURLcode ccurl_set_text(CURL *curl, CURLoption option, const char *value) {
    return curl_easy_setopt(curl, option, value);
}
static inline CURLcode ccurl_set_long(CURL *curl, CURLoption option, long value) {
    return curl_easy_setopt(curl, option, value);
}
static inline CURLcode ccurl_set_pointer(CURL *curl, CURLoption option, void *value) {
    return curl_easy_setopt(curl, option, value);
}
static inline CURLcode ccurl_set_list(CURL *curl, CURLoption option, struct curl_slist *value) {
    return curl_easy_setopt(curl, option, value);
}
static inline CURLcode ccurl_set_read_function(CURL *curl, curl_read_callback function) {
    return curl_easy_setopt(curl, CURLOPT_READFUNCTION, function);
}
static inline long ccurl_response_code(CURL *curl) {
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    return code;
}
static inline CURLcode ccurl_set_write_function(CURL *curl, curl_write_callback function) {
    return curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, function);
}
static inline CURLcode ccurl_set_header_function(CURL *curl, curl_write_callback function) {
    return curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, function);
}
