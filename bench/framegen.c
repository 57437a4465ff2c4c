/* A 64-byte frame generator for bench/wire_bench.py.
 *
 *     framegen IFNAME DST_MAC SRC_MAC SRC_IP DST_IP SECONDS
 *
 * Sends one IPv4/UDP frame (14 + 20 + 8 + 22 = 64 bytes, no FCS) out of
 * IFNAME as fast as the kernel takes it, for SECONDS, and prints
 * {"sent": N, "seconds": S} on stdout. It writes through an AF_PACKET socket
 * with PACKET_QDISC_BYPASS, 64 frames per sendmmsg(2), so each frame costs the
 * link its own transmit and receive but the generator almost nothing: iperf3's
 * UDP sockets cost more per frame than the links measured, so they measured
 * iperf3. Unlike trafgen it pins no CPU and tunes no global sysctl, so two
 * generators share the machine's cores with everything else like any process.
 * A full device queue (ENOBUFS) is not an error: the frame is not sent and
 * the loop goes on.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FRAME 64
#define BURST 64
#define UDP_PORT 9 /* discard */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int parse_mac(const char *text, uint8_t *mac)
{
    unsigned int b[6];
    if (sscanf(text, "%x:%x:%x:%x:%x:%x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]) != 6)
        return -1;
    for (int i = 0; i < 6; i++) {
        if (b[i] > 0xff)
            return -1;
        mac[i] = (uint8_t)b[i];
    }
    return 0;
}

static uint16_t ip_checksum(const uint8_t *header, size_t len)
{
    uint32_t sum = 0;
    for (size_t i = 0; i < len; i += 2)
        sum += (uint32_t)(header[i] << 8 | header[i + 1]);
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)~sum;
}

/* Ethernet, IPv4 (TTL 64, DF, checksummed), UDP (checksum 0: none), zeros. */
static int build_frame(uint8_t *f, char **argv)
{
    memset(f, 0, FRAME);
    if (parse_mac(argv[2], f) || parse_mac(argv[3], f + 6))
        return -1;
    f[12] = 0x08;
    uint8_t *ip = f + 14;
    ip[0] = 0x45;
    ip[3] = FRAME - 14;
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 17;
    if (inet_pton(AF_INET, argv[4], ip + 12) != 1 || inet_pton(AF_INET, argv[5], ip + 16) != 1)
        return -1;
    uint16_t sum = ip_checksum(ip, 20);
    ip[10] = (uint8_t)(sum >> 8);
    ip[11] = (uint8_t)sum;
    uint8_t *udp = ip + 20;
    udp[1] = UDP_PORT;
    udp[3] = UDP_PORT;
    udp[5] = FRAME - 14 - 20;
    return 0;
}

int main(int argc, char **argv)
{
    uint8_t frame[FRAME];
    if (argc != 7 || build_frame(frame, argv) != 0) {
        fprintf(stderr, "usage: framegen IFNAME DST_MAC SRC_MAC SRC_IP DST_IP SECONDS\n");
        return 2;
    }
    double seconds = atof(argv[6]);
    unsigned int ifindex = if_nametoindex(argv[1]);
    if (ifindex == 0 || seconds <= 0) {
        fprintf(stderr, "framegen: no interface %s, or SECONDS %s not positive\n", argv[1], argv[6]);
        return 2;
    }
    /* Protocol 0: the socket receives nothing, it only sends. */
    int fd = socket(AF_PACKET, SOCK_RAW, 0);
    int one = 1;
    struct sockaddr_ll to = {
        .sll_family = AF_PACKET, .sll_ifindex = (int)ifindex, .sll_halen = 6,
    };
    memcpy(to.sll_addr, frame, 6);
    if (fd < 0 || setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&to, sizeof to) != 0) {
        perror("framegen: packet socket");
        return 1;
    }

    struct iovec iov = {.iov_base = frame, .iov_len = FRAME};
    struct mmsghdr burst[BURST];
    memset(burst, 0, sizeof burst);
    for (int i = 0; i < BURST; i++) {
        burst[i].msg_hdr.msg_iov = &iov;
        burst[i].msg_hdr.msg_iovlen = 1;
    }
    unsigned long long sent = 0;
    double start = now(), end = start + seconds, t = start;
    while (t < end) {
        int n = sendmmsg(fd, burst, BURST, 0);
        if (n > 0)
            sent += (unsigned long long)n;
        else if (errno != ENOBUFS && errno != EAGAIN && errno != EINTR) {
            perror("framegen: sendmmsg");
            return 1;
        }
        t = now();
    }
    printf("{\"sent\": %llu, \"seconds\": %.6f}\n", sent, t - start);
    return 0;
}
