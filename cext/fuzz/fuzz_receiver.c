/* libFuzzer target: the Wire service's receiver (h2receiver.c) fed an HTTP/2 byte
 * stream, as after a passed preface: nghttp2 and every callback of ours (headers,
 * calls, DATA into the Batch decoder, delivery to a wire's fd, answers).
 *
 * Input: [flags u8][bytes...]. Bit 0 of flags: prepend the HTTP/2 client magic (so
 * the fuzzer spends its time past it). The bytes are written, in chunks of at most 512,
 * to one end of a socket pair whose other end the receiver serves; what it answers is
 * drained. Wire 1 of namespace "lab" writes to /dev/null.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "h2wire.h"
#include "wirec.h"

#define MAGIC "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define CHUNK 512

static mw_table *table;
static int sink = -1;

static void drain(int fd)
{
    uint8_t buf[4096];
    while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
        ;
}

static int step(mw_receiver *r, int peer, const uint8_t *data, size_t len)
{
    if (len && send(peer, data, len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
        return MW_IO_DONE;
    int bits = mw_receiver_on_readable(r);
    drain(peer);
    if (!(bits & MW_IO_DONE) && (bits & MW_IO_WRITE))
        bits = mw_receiver_on_writable(r);
    drain(peer);
    return bits;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (!table) {
        table = mw_table_new(1 << 16);
        sink = open("/dev/null", O_WRONLY | O_NONBLOCK);
        if (!table || sink < 0 || mw_table_set(table, 1, sink, mw_table_tag(table, "lab", 3, 1), 2))
            abort();
    }
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds) != 0)
        abort();
    mw_rx_stats stats = {0};
    mw_receiver *r = mw_receiver_new(fds[0], table, &stats);
    if (!r)
        abort();
    int bits = mw_receiver_on_writable(r);
    drain(fds[1]);
    if (data[0] & 1)
        bits = step(r, fds[1], (const uint8_t *)MAGIC, strlen(MAGIC));
    const uint8_t *p = data + 1;
    size_t left = size - 1;
    while (left && !(bits & MW_IO_DONE)) {
        size_t n = left < CHUNK ? left : CHUNK;
        bits = step(r, fds[1], p, n);
        p += n;
        left -= n;
    }
    mw_receiver_free(r);
    close(fds[0]);
    close(fds[1]);
    return 0;
}
