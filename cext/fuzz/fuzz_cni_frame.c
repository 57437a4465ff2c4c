/* libFuzzer target: the CNI shim's reading of the daemon's answer frame
 * (cni_shim.c's reproduce, the frame protocol of control/cni/frame.py), included whole
 * so its static functions are reachable; its main is renamed away.
 *
 * Input: an answer frame, `{"exit":N,"stdout":"<text>"}\n` when well formed. The shim
 * prints the text (stdout goes to /dev/null here) and exits with N in 0..255, or
 * prints a CNI error and exits 1.
 */
#define main meshwire_cni_shim_main
#include "../cni_shim.c"
#undef main

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (!freopen("/dev/null", "w", stdout))
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct buf answer = {0};
    buf_put(&answer, data, size);
    int code = reproduce(&answer, LATEST_VERSION, "/run/fuzz.sock");
    if (code < 0 || code > 255)
        abort();
    fflush(stdout);
    free(answer.data);
    return 0;
}
