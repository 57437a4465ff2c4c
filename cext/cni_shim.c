/*
 * meshwire CNI shim: the `meshnet` binary the container runtime execs.
 *
 * It forwards the CNI environment and the network config (stdin) to the
 * meshwire daemon over a Unix socket and reproduces the daemon's answer:
 * its stdout text and its exit code. It needs only libc, so it runs on a node
 * without Python. The wire format and every decision below are those of
 * control/cni/frame.py; the Python twin control/cni/shim.py behaves the same
 * and writes byte-identical request frames.
 *
 *   request   {"v":1,"env":{<CNI_* variables sorted by name>},"stdin":"<config>"}\n
 *   response  {"exit":N,"stdout":"<text>"}\n
 *
 * Socket: env MESHWIRE_CNI_SOCKET if non-empty, else the network config's
 * top-level string field "meshwire_socket" if non-empty, else
 * /run/meshwire/cni.sock. An empty "cniVersion" is as good as none: error
 * results then carry the latest version.
 *
 * The config and the answer are read as JSON only if they are JSON by RFC 8259:
 * UTF-8, numbers and literals by its grammar (no NaN), nested at most MAX_DEPTH.
 * A config that is not has no fields here (the daemon answers it with code 6);
 * a socket path or cniVersion holding NUL or a lone surrogate is absent.
 *
 * VERSION is answered locally. A daemon that cannot be reached, or that closes
 * without a complete answer, is CNI error 11 (try again later); an answer that
 * is not {"exit": 0..255, "stdout": string} is CNI error 5. Errors go to stdout
 * as CNI error JSON with exit 1, as the spec asks, ASCII-only as the twin's
 * json.dumps writes them (bytes that are not UTF-8 as \udcXX).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define DEFAULT_SOCKET "/run/meshwire/cni.sock"
#define SOCKET_ENV "MESHWIRE_CNI_SOCKET"
#define SOCKET_FIELD "meshwire_socket"
#define LATEST_VERSION "1.1.0"
#define MAX_FRAME_BYTES (8u << 20)
#define MAX_SOCKET_PATH_BYTES 107
/* Deeper configs count as malformed when looking for cniVersion/meshwire_socket
 * (Python's parser gives up near 1000); stdin is still forwarded verbatim and
 * the daemon answers it. */
#define MAX_DEPTH 512

static const char *const supported_versions[] = {"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"};

/* The VERSION result, byte-identical to protocol.version_result(). */
static const char version_result[] =
    "{\"cniVersion\": \"1.1.0\", \"supportedVersions\": "
    "[\"0.3.0\", \"0.3.1\", \"0.4.0\", \"1.0.0\", \"1.1.0\"]}\n";

extern char **environ;

/* ---- growable byte buffer ------------------------------------------------ */

struct buf {
    char *data;
    size_t len, cap;
};

static void out_of_memory(void)
{
    static const char msg[] = "{\"cniVersion\": \"" LATEST_VERSION
                              "\", \"code\": 5, \"msg\": \"meshwire CNI shim: out of memory\"}\n";
    if (write(STDOUT_FILENO, msg, sizeof msg - 1) < 0) {
        _exit(1);
    }
    _exit(1);
}

static void buf_put(struct buf *b, const void *data, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) {
            cap *= 2;
        }
        char *grown = realloc(b->data, cap);
        if (!grown) {
            out_of_memory();
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void buf_puts(struct buf *b, const char *s)
{
    buf_put(b, s, strlen(s));
}

/* The letter of the JSON short escape of code point c (" \ \b \f \n \r \t), or 0. */
static char short_escape(unsigned c)
{
    static const char plain[] = "\"\\\b\f\n\r\t", letter[] = "\"\\bfnrt";
    const char *at = c && c < 0x80 ? strchr(plain, (int)c) : NULL;
    return at ? letter[at - plain] : 0;
}

/* Appends \uXXXX (lowercase hex) for the UTF-16 code unit u. */
static void buf_put_u_escape(struct buf *b, unsigned u)
{
    static const char hex[] = "0123456789abcdef";
    char esc[6] = {'\\', 'u', hex[u >> 12 & 15], hex[u >> 8 & 15], hex[u >> 4 & 15], hex[u & 15]};
    buf_put(b, esc, sizeof esc);
}

/* Appends s as a JSON string exactly as Python's json.dumps(ensure_ascii=False):
 * short escapes for " \ \b \f \n \r \t, \u00xx (lowercase) for other control
 * bytes, every other byte (UTF-8 or not) unchanged. */
static void buf_put_json_string(struct buf *b, const char *s, size_t n)
{
    buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[2] = {'\\', short_escape(c)};
        if (esc[1]) {
            buf_put(b, esc, 2);
        } else if (c < 0x20) {
            buf_put_u_escape(b, c);
        } else {
            buf_put(b, &s[i], 1);
        }
    }
    buf_put(b, "\"", 1);
}

/* The length of the UTF-8 sequence at s[0..n), 1..4, with its code point in *cp;
 * 0 if none starts there: strict as Python's decoder (no overlong forms, no
 * surrogates, nothing past U+10FFFF). */
static size_t utf8_char(const unsigned char *s, size_t n, unsigned *cp)
{
    size_t len;
    unsigned min;
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if (s[0] >= 0xC2 && s[0] <= 0xDF) {
        len = 2, min = 0x80, *cp = s[0] & 0x1Fu;
    } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
        len = 3, min = 0x800, *cp = s[0] & 0x0Fu;
    } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
        len = 4, min = 0x10000, *cp = s[0] & 0x07u;
    } else {
        return 0;
    }
    if (n < len) {
        return 0;
    }
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            return 0;
        }
        *cp = (*cp << 6) | (s[i] & 0x3Fu);
    }
    if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp < 0xE000)) {
        return 0;
    }
    return len;
}

static int utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0, len; i < n; i += len) {
        unsigned cp;
        if (!(len = utf8_char(p + i, n - i, &cp))) {
            return 0;
        }
    }
    return 1;
}

/* Appends s as Python's json.dumps (ensure_ascii) writes the str that s decodes to
 * with surrogateescape: short escapes for " \ \b \f \n \r \t, printable ASCII
 * unchanged, every other character as lowercase \uXXXX (a surrogate pair above
 * U+FFFF), each byte that is not UTF-8 as \udcXX. */
static void buf_put_json_ascii(struct buf *b, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    buf_put(b, "\"", 1);
    for (size_t i = 0, len; i < n; i += len) {
        unsigned cp;
        if (!(len = utf8_char(p + i, n - i, &cp))) {
            len = 1, cp = 0xDC00u | p[i];
        }
        char esc[2] = {'\\', short_escape(cp)};
        if (esc[1]) {
            buf_put(b, esc, 2);
        } else if (cp >= 0x20 && cp < 0x7F) {
            buf_put(b, &p[i], 1);
        } else if (cp < 0x10000) {
            buf_put_u_escape(b, cp);
        } else {
            buf_put_u_escape(b, 0xD800 + ((cp - 0x10000) >> 10));
            buf_put_u_escape(b, 0xDC00 + ((cp - 0x10000) & 0x3FF));
        }
    }
    buf_put(b, "\"", 1);
}

/* Reads fd until EOF, or until more than `limit` bytes; a read error ends it too. */
static int read_all(int fd, struct buf *b, size_t limit)
{
    char chunk[65536];
    while (b->len <= limit) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return -1;
        }
        if (n == 0) {
            break;
        }
        buf_put(b, chunk, (size_t)n);
    }
    return 0;
}

/* ---- a small JSON scanner: validates a document, finds top-level members -- */

struct scan {
    const char *p, *end;
};

static void skip_ws(struct scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) {
        s->p++;
    }
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') {
            v |= (unsigned)(c - '0');
        } else if (c >= 'a' && c <= 'f') {
            v |= (unsigned)(c - 'a' + 10);
        } else if (c >= 'A' && c <= 'F') {
            v |= (unsigned)(c - 'A' + 10);
        } else {
            return -1;
        }
    }
    *out = v;
    return 0;
}

static void put_utf8(struct buf *b, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    buf_put(b, u, n);
}

/* Scans a JSON string at s->p; appends its unescaped UTF-8 to out unless NULL.
 * A surrogate pair becomes one code point; a lone surrogate is encoded as is
 * (as Python's surrogatepass does). Returns 0, or -1 if malformed. */
static int scan_string(struct scan *s, struct buf *out)
{
    if (s->p >= s->end || *s->p != '"') {
        return -1;
    }
    s->p++;
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            s->p++;
            return 0;
        }
        if (c < 0x20) {
            return -1;
        }
        if (c != '\\') {
            if (out) {
                buf_put(out, s->p, 1);
            }
            s->p++;
            continue;
        }
        if (s->end - s->p < 2) {
            return -1;
        }
        static const char escapes[] = "\"\\/bfnrt", unescaped[] = "\"\\/\b\f\n\r\t";
        char e = s->p[1];
        const char *plain = e ? strchr(escapes, e) : NULL;
        if (e != 'u') {
            if (!plain) {
                return -1;
            }
            if (out) {
                buf_put(out, &unescaped[plain - escapes], 1);
            }
            s->p += 2;
            continue;
        }
        unsigned cp, low;
        if (s->end - s->p < 6 || hex4(s->p + 2, &cp) < 0) {
            return -1;
        }
        s->p += 6;
        if (cp >= 0xD800 && cp < 0xDC00 && s->end - s->p >= 6 && s->p[0] == '\\' &&
            s->p[1] == 'u' && hex4(s->p + 2, &low) == 0 && low >= 0xDC00 && low < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            s->p += 6;
        }
        if (out) {
            put_utf8(out, cp);
        }
    }
    return -1;
}

static int skip_value(struct scan *s, int depth);

static int skip_digits(struct scan *s)
{
    const char *start = s->p;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
        s->p++;
    }
    return s->p > start ? 0 : -1;
}

/* A number as RFC 8259 writes it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int skip_number(struct scan *s)
{
    if (s->p < s->end && *s->p == '-') {
        s->p++;
    }
    if (s->p < s->end && *s->p == '0') {
        s->p++;
    } else if (skip_digits(s) < 0) {
        return -1;
    }
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (skip_digits(s) < 0) {
            return -1;
        }
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-')) {
            s->p++;
        }
        return skip_digits(s);
    }
    return 0;
}

/* Scans the members of an object at s->p. If key is not NULL, *found is set to
 * the value of the last member named key (the one a JSON parser keeps). */
static int scan_object(struct scan *s, int depth, const char *key, struct scan *found)
{
    struct buf name = {0};
    int rc = -1;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 0;
    }
    while (s->p < s->end) {
        name.len = 0;
        skip_ws(s);
        if (scan_string(s, key ? &name : NULL) < 0) {
            break;
        }
        skip_ws(s);
        if (s->p >= s->end || *s->p != ':') {
            break;
        }
        s->p++;
        skip_ws(s);
        if (key && name.len == strlen(key) && memcmp(name.data, key, name.len) == 0) {
            found->p = s->p;
            found->end = s->end;
        }
        if (skip_value(s, depth + 1) < 0) {
            break;
        }
        skip_ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        if (s->p < s->end && *s->p == '}') {
            s->p++;
            rc = 0;
        }
        break;
    }
    free(name.data);
    return rc;
}

static int skip_value(struct scan *s, int depth)
{
    skip_ws(s);
    if (s->p >= s->end || depth > MAX_DEPTH) {
        return -1;
    }
    if (*s->p == '"') {
        return scan_string(s, NULL);
    }
    if (*s->p == '{') {
        return scan_object(s, depth, NULL, NULL);
    }
    if (*s->p == '[') {
        s->p++;
        skip_ws(s);
        if (s->p < s->end && *s->p == ']') {
            s->p++;
            return 0;
        }
        for (;;) {
            if (skip_value(s, depth + 1) < 0) {
                return -1;
            }
            skip_ws(s);
            if (s->p < s->end && *s->p == ',') {
                s->p++;
                continue;
            }
            if (s->p < s->end && *s->p == ']') {
                s->p++;
                return 0;
            }
            return -1;
        }
    }
    static const char *const literals[] = {"true", "false", "null"};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(literals[i]);
        if ((size_t)(s->end - s->p) >= n && memcmp(s->p, literals[i], n) == 0) {
            s->p += n;
            return 0;
        }
    }
    return skip_number(s);
}

/* Finds the top-level member `key` of the JSON object doc[0..len). Returns 1 and
 * sets *value when the whole document is a well-formed object that has it. */
static int find_member(const char *doc, size_t len, const char *key, struct scan *value)
{
    struct scan s = {doc, doc + len};
    struct scan found = {NULL, NULL};
    if (!utf8_valid(doc, len)) {
        return 0;
    }
    skip_ws(&s);
    if (s.p >= s.end || *s.p != '{' || scan_object(&s, 0, key, &found) < 0) {
        return 0;
    }
    skip_ws(&s);
    if (s.p != s.end || !found.p) {
        return 0;
    }
    *value = found;
    return 1;
}

/* The top-level string member `key` of doc, unescaped into out (NUL-terminated);
 * 0 if absent, not a string, empty, or containing a NUL byte or a lone surrogate
 * (escaped; not UTF-8 once unescaped): an empty string counts as absent, as in
 * the Python twin. */
static int top_level_string(const struct buf *doc, const char *key, struct buf *out)
{
    struct scan value;
    out->len = 0;
    if (!doc->len || !find_member(doc->data, doc->len, key, &value)) {
        return 0;
    }
    if (scan_string(&value, out) < 0 || !out->len || memchr(out->data, '\0', out->len) ||
        !utf8_valid(out->data, out->len)) {
        return 0;
    }
    return 1;
}

/* ---- results ------------------------------------------------------------- */

static int print_error(const char *version, int code, const char *msg, const char *sock,
                       const char *reason)
{
    struct buf out = {0}, details = {0};
    char number[16];
    buf_puts(&details, sock);
    buf_puts(&details, reason);
    snprintf(number, sizeof number, "%d", code);
    buf_puts(&out, "{\"cniVersion\": ");
    buf_put_json_ascii(&out, version, strlen(version));
    buf_puts(&out, ", \"code\": ");
    buf_puts(&out, number);
    buf_puts(&out, ", \"msg\": ");
    buf_put_json_ascii(&out, msg, strlen(msg));
    buf_puts(&out, ", \"details\": ");
    buf_put_json_ascii(&out, details.data, details.len);
    buf_puts(&out, "}\n");
    fwrite(out.data, 1, out.len, stdout);
    free(out.data);
    free(details.data);
    return 1;
}

static int unreachable(const char *version, const char *sock, const char *reason)
{
    struct buf r = {0};
    buf_puts(&r, ": ");
    buf_puts(&r, reason);
    int code = print_error(version, 11, "meshwire daemon unreachable", sock, r.data);
    free(r.data);
    return code;
}

/* ---- the request frame ---------------------------------------------------- */

static int by_name(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    size_t nx = strcspn(x, "="), ny = strcspn(y, "=");
    int c = memcmp(x, y, nx < ny ? nx : ny);
    return c ? c : (nx > ny) - (nx < ny);
}

static void build_request(struct buf *frame, const struct buf *stdin_data)
{
    size_t count = 0, n = 0;
    for (char **e = environ; *e; e++) {
        count += strncmp(*e, "CNI_", 4) == 0;
    }
    const char **vars = calloc(count ? count : 1, sizeof *vars);
    if (!vars) {
        out_of_memory();
    }
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "CNI_", 4) == 0 && strchr(*e, '=')) {
            vars[n++] = *e;
        }
    }
    qsort(vars, n, sizeof *vars, by_name);
    buf_puts(frame, "{\"v\":1,\"env\":{");
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(vars[i], '=');
        if (i) {
            buf_puts(frame, ",");
        }
        buf_put_json_string(frame, vars[i], (size_t)(eq - vars[i]));
        buf_puts(frame, ":");
        buf_put_json_string(frame, eq + 1, strlen(eq + 1));
    }
    buf_puts(frame, "},\"stdin\":");
    buf_put_json_string(frame, stdin_data->data ? stdin_data->data : "", stdin_data->len);
    buf_puts(frame, "}\n");
    free(vars);
}

static void send_all(int fd, const struct buf *b)
{
    size_t off = 0;
    while (off < b->len) {
        ssize_t n = send(fd, b->data + off, b->len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return; /* the daemon may have answered before reading it all */
        }
        off += (size_t)n;
    }
}

/* ---- the answer ------------------------------------------------------------ */

static int reproduce(const struct buf *answer, const char *version, const char *sock)
{
    struct scan exit_at, stdout_at;
    struct buf text = {0};
    if (!answer->len || answer->data[answer->len - 1] != '\n') {
        return print_error(version, 11, "meshwire daemon closed the connection without answering",
                           "socket ", sock);
    }
    if (find_member(answer->data, answer->len, "exit", &exit_at) &&
        find_member(answer->data, answer->len, "stdout", &stdout_at) &&
        scan_string(&stdout_at, &text) == 0) {
        /* -0 is 0, as JSON reads it; the scanner has checked the number's grammar. */
        int negative = exit_at.p < exit_at.end && exit_at.p[0] == '-';
        const char *p = exit_at.p + negative;
        long code = 0;
        int digits = 0;
        while (p < exit_at.end && *p >= '0' && *p <= '9' && digits < 4) {
            code = code * 10 + (*p++ - '0');
            digits++;
        }
        int ends = p == exit_at.end || strchr(" \t\r\n,}", *p);
        if (digits && ends && code <= 255 && !(negative && code)) {
            fwrite(text.data ? text.data : "", 1, text.len, stdout);
            free(text.data);
            return (int)code;
        }
    }
    free(text.data);
    return print_error(version, 5, "malformed answer from the meshwire daemon", "socket ", sock);
}

int main(void)
{
    struct buf in = {0}, field = {0}, frame = {0}, answer = {0};
    const char *version = LATEST_VERSION;
    const char *command = getenv("CNI_COMMAND");
    const char *socket_path = getenv(SOCKET_ENV);

    if (command && strcmp(command, "VERSION") == 0) {
        fputs(version_result, stdout);
        return 0;
    }
    if (read_all(STDIN_FILENO, &in, SIZE_MAX - 1) < 0) {
        return print_error(version, 5, "cannot read the network config from stdin", "stdin: ",
                           strerror(errno));
    }
    if (top_level_string(&in, "cniVersion", &field)) {
        for (size_t i = 0; i < sizeof supported_versions / sizeof *supported_versions; i++) {
            if (strcmp(field.data, supported_versions[i]) == 0) {
                version = supported_versions[i];
            }
        }
    }
    if (!socket_path || !*socket_path) {
        socket_path = top_level_string(&in, SOCKET_FIELD, &field) ? field.data : DEFAULT_SOCKET;
    }

    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(socket_path) > MAX_SOCKET_PATH_BYTES) {
        return unreachable(version, socket_path, "socket path longer than 107 bytes");
    }
    memcpy(addr.sun_path, socket_path, strlen(socket_path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        return unreachable(version, socket_path, strerror(errno));
    }
    build_request(&frame, &in);
    send_all(fd, &frame);
    shutdown(fd, SHUT_WR);
    read_all(fd, &answer, MAX_FRAME_BYTES);
    close(fd);
    return reproduce(&answer, version, socket_path);
}
