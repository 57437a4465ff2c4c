/* libFuzzer target: the CNI shim's JSON scanner (cni_shim.c), included whole so its
 * static functions are reachable; its main is renamed away.
 *
 * Input: a network config, as the shim reads it from stdin. The top-level strings
 * "cniVersion" and "meshwire_socket" are looked up: a string found is unescaped,
 * never longer than the document, free of NUL bytes and valid UTF-8.
 */
#define main meshwire_cni_shim_main
#include "../cni_shim.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const keys[] = {"cniVersion", SOCKET_FIELD};
    struct buf doc = {0}, field = {0};
    buf_put(&doc, data, size);
    for (size_t i = 0; i < 2; i++) {
        if (top_level_string(&doc, keys[i], &field) &&
            (field.len > doc.len || (field.data && memchr(field.data, 0, field.len)) ||
             !utf8_valid(field.data, field.len)))
            abort();
    }
    free(doc.data);
    free(field.data);
    return 0;
}
