/* Remote sources: the parsers of what servers send and of URLs, and —
 * where libcurl is built in — the HTTP kind against a small server of the
 * test's own on loopback (so that the sanitizers see every path: batches
 * that merge, split and overlap, retries that resume, lies, the cache). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base64.h"
#include "base/sha256.h"
#include "helpers.h"
#include "io/file.h"
#include "io/http.h"

/* ---- SHA-256 and the digests servers state ------------------------------------------ */

static void sha_hex(const void *data, size_t n, char hex[65]) {
    ckpt__sha256 s;
    ckpt__sha256_init(&s);
    ckpt__sha256_update(&s, data, n);
    unsigned char d[32];
    ckpt__sha256_final(&s, d);
    ckpt__sha256_hex(d, hex);
}

static void test_sha256(void **state) {
    (void)state;
    char hex[65];
    /* FIPS 180-4's examples. */
    sha_hex("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha_hex(two, strlen(two), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* A million 'a', fed in uneven pieces (the block buffer's every path). */
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    ckpt__sha256 s;
    ckpt__sha256_init(&s);
    for (size_t at = 0, step = 1; at < 1000000; at += step, step = step * 3 % 997 + 1)
        ckpt__sha256_update(&s, a + at, at + step > 1000000 ? 1000000 - at : step);
    unsigned char d[32];
    ckpt__sha256_final(&s, d);
    ckpt__sha256_hex(d, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(a);
    /* Lengths around the padding's edge (55, 56, 63, 64 bytes). */
    static const char *const edges[][2] = {
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
         "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
         "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
         "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
         "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
    };
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) {
        sha_hex(edges[i][0], strlen(edges[i][0]), hex);
        assert_string_equal(hex, edges[i][1]);
    }
}

static void test_etag_sha256(void **state) {
    (void)state;
    const char *sha = "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318";
    char q[80], out[65];
    snprintf(q, sizeof q, "\"%s\"", sha);
    assert_true(ckpt__etag_sha256(q, strlen(q), out));
    assert_string_equal(out, sha);
    snprintf(q, sizeof q, "W/\"%s\"", sha);
    assert_true(ckpt__etag_sha256(q, strlen(q), out));
    assert_true(ckpt__etag_sha256(sha, 64, out));
    /* A server's own version tags say nothing of the bytes. */
    const char *not[] = {"\"v1\"", "\"5f1b-64a8c1f0\"", "\"9F4390F8D30C2DD92EC9F095B65E2B9AE9B0A925A5258E241C9F1E910F734318\"",
                         "\"9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f73431\"", ""};
    for (size_t i = 0; i < sizeof not / sizeof *not; i++) assert_false(ckpt__etag_sha256(not[i], strlen(not[i]), out));
}

/* ---- parsers -------------------------------------------------------------- */

static bool cr(const char *s, ckpt__content_range *out) { return ckpt__parse_content_range(s, strlen(s), out); }

static void test_content_range(void **state) {
    (void)state;
    ckpt__content_range r;
    assert_true(cr("bytes 0-99/1000", &r));
    assert_true(r.has_range && r.has_total && r.first == 0 && r.last == 99 && r.total == 1000);
    assert_true(cr("  Bytes 5-5/6 ", &r));
    assert_true(r.first == 5 && r.last == 5 && r.total == 6);
    assert_true(cr("bytes */0", &r));
    assert_true(!r.has_range && r.has_total && r.total == 0);
    assert_true(cr("bytes 10-19/*", &r));
    assert_true(r.has_range && !r.has_total);
    assert_true(cr("bytes 0-0/9223372036854775808", &r)); /* 2^63 is a number; what it means is judged above */
    assert_int_equal(r.total, 1ULL << 63);
    const char *bad[] = {"", "bytes", "bytes ", "bytes 1-0/10", "bytes 0-10/10", "bytes */*", "bytes 0-1",
                         "bytes -1-5/10", "bits 0-1/2", "bytes 0-99/1000x", "bytes 0-18446744073709551616/5",
                         "bytes 18446744073709551615-18446744073709551615/18446744073709551616", "bytes0-1/2",
                         "bytes 0 -1/2", "bytes 0-1 /2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) assert_false(cr(bad[i], &r));
}

static void test_headers_and_retry_after(void **state) {
    (void)state;
    const char *n, *v;
    size_t nl, vl;
    const char line[] = "Content-Range:  bytes 0-1/2 \r\n";
    assert_true(ckpt__split_header(line, sizeof line - 1, &n, &nl, &v, &vl));
    assert_true(ckpt__header_is(n, nl, "content-range"));
    assert_int_equal(vl, 11);
    assert_memory_equal(v, "bytes 0-1/2", 11);
    assert_false(ckpt__split_header("HTTP/1.1 206 Partial\r\n", 22, &n, &nl, &v, &vl));
    assert_false(ckpt__split_header(": x\r\n", 5, &n, &nl, &v, &vl));
    assert_false(ckpt__split_header("\r\n", 2, &n, &nl, &v, &vl));
    unsigned s;
    assert_true(ckpt__parse_retry_after("7", 1, 60, &s) && s == 7);
    assert_true(ckpt__parse_retry_after("99999999999999999999999", 23, 60, &s) && s == 60);
    assert_false(ckpt__parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 29, 60, &s));
    assert_false(ckpt__parse_retry_after("", 0, 60, &s));
    char out[16];
    const char xml[] = "<Error><Code>NoSuchKey</Code><Message>The key\x01 is gone, and more text</Message></Error>";
    assert_true(ckpt__xml_element(xml, sizeof xml - 1, "Code", out, sizeof out));
    assert_string_equal(out, "NoSuchKey");
    assert_true(ckpt__xml_element(xml, sizeof xml - 1, "Message", out, sizeof out));
    assert_string_equal(out, "The key  is gon"); /* truncated to fit */
    assert_false(ckpt__xml_element(xml, sizeof xml - 1, "Region", out, sizeof out));
    assert_false(ckpt__xml_element("<Code", 5, "Code", out, sizeof out));
}

/* HMAC-SHA256 (RFC 4231's cases 1, 2 and 6: a key longer than a block)
 * and Base64 (RFC 4648's examples), which the stores' signatures use. */
static void test_hmac_and_base64(void **state) {
    (void)state;
    unsigned char mac[32], key[131];
    char hex[65];
    memset(key, 0x0b, 20);
    ckpt__hmac_sha256(key, 20, "Hi There", 8, mac);
    ckpt__sha256_hex(mac, hex);
    assert_string_equal(hex, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    ckpt__hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, mac);
    ckpt__sha256_hex(mac, hex);
    assert_string_equal(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    memset(key, 0xaa, sizeof key);
    const char *msg = "Test Using Larger Than Block-Size Key - Hash Key First";
    ckpt__hmac_sha256(key, sizeof key, msg, strlen(msg), mac);
    ckpt__sha256_hex(mac, hex);
    assert_string_equal(hex, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    static const char *const cases[][3] = {{"", "", ""},           {"f", "Zg==", "Zg"},
                                           {"fo", "Zm8=", "Zm8"},  {"foo", "Zm9v", "Zm9v"},
                                           {"foob", "Zm9vYg==", "Zm9vYg"}, {"fooba", "Zm9vYmE=", "Zm9vYmE"},
                                           {"foobar", "Zm9vYmFy", "Zm9vYmFy"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ckpt__buf std = {0}, url = {0}, back = {0};
        ckpt__base64_encode(&std, cases[i][0], strlen(cases[i][0]), false);
        ckpt__base64_encode(&url, cases[i][0], strlen(cases[i][0]), true);
        assert_string_equal(std.data ? std.data : "", cases[i][1]);
        assert_string_equal(url.data ? url.data : "", cases[i][2]);
        assert_true(ckpt__base64_decode(&back, cases[i][1], strlen(cases[i][1])));
        assert_int_equal(back.len, strlen(cases[i][0]));
        assert_memory_equal(back.data ? back.data : "", cases[i][0], back.len);
        free(std.data), free(url.data), free(back.data);
    }
    unsigned char all[3] = {0xfb, 0xff, 0xbf};
    ckpt__buf std = {0}, url = {0}, bad = {0};
    ckpt__base64_encode(&std, all, 3, false);
    ckpt__base64_encode(&url, all, 3, true);
    assert_string_equal(std.data, "+/+/");
    assert_string_equal(url.data, "-_-_");
    assert_false(ckpt__base64_decode(&bad, "Zm9v!", 5));
    assert_false(ckpt__base64_decode(&bad, "Z", 1));
    free(std.data), free(url.data), free(bad.data);
}

/* A store's listing and its error bodies. */
static void test_store_xml(void **state) {
    (void)state;
    const char xml[] = "<ListBucketResult><Prefix>d/</Prefix><Contents><Key>d/a&amp;b&#46;bin</Key></Contents>"
                       "<Contents><Key>d/&lt;c&gt; &quot;q&apos;</Key></Contents><Contents><Key></Key></Contents>"
                       "<NextMarker>d/x</NextMarker></ListBucketResult>";
    ckpt__buf item = {0};
    size_t pos = 0;
    assert_true(ckpt__xml_next(xml, sizeof xml - 1, "Key", &pos, &item));
    assert_string_equal(item.data, "d/a&b.bin");
    assert_true(ckpt__xml_next(xml, sizeof xml - 1, "Key", &pos, &item));
    assert_string_equal(item.data, "d/<c> \"q'");
    assert_true(ckpt__xml_next(xml, sizeof xml - 1, "Key", &pos, &item));
    assert_int_equal(item.len, 0);
    assert_false(ckpt__xml_next(xml, sizeof xml - 1, "Key", &pos, &item));
    pos = 0;
    assert_true(ckpt__xml_next(xml, sizeof xml - 1, "NextMarker", &pos, &item));
    assert_string_equal(item.data, "d/x");
    pos = 0;
    assert_false(ckpt__xml_next("<NextMarker />", 14, "NextMarker", &pos, &item));
    free(item.data);
    char out[160];
    const char azure[] = "<Error><Code>AuthenticationFailed</Code><Message>Server failed.\nRequestId:1</Message>"
                         "<AuthenticationErrorDetail>Signature not valid</AuthenticationErrorDetail></Error>";
    ckpt__store_error_text(azure, sizeof azure - 1, out, sizeof out);
    assert_string_equal(out, ": AuthenticationFailed: Server failed. RequestId:1 (Signature not valid)");
    const char gcs[] = "<Error><Code>AccessDenied</Code><Message>Access denied.</Message><Details>Anonymous caller"
                       "</Details></Error>";
    ckpt__store_error_text(gcs, sizeof gcs - 1, out, sizeof out);
    assert_string_equal(out, ": AccessDenied: Access denied. (Anonymous caller)");
    assert_int_equal(ckpt__store_error_text("<html/>", 7, out, sizeof out), 0);
    assert_string_equal(out, "");
    assert_int_equal(ckpt__store_error_text(azure, sizeof azure - 1, out, 8), 7); /* cut to fit */
}

static void test_urls(void **state) {
    (void)state;
    ckpt__url_parts u;
    assert_true(ckpt__url_split("https://u:p@h.example:8443/a/b.safetensors?x=1#f", &u));
    assert_int_equal(u.userinfo_len, 3);
    assert_memory_equal(u.host, "h.example:8443", u.host_len);
    assert_memory_equal(u.path, "/a/b.safetensors", u.path_len);
    assert_memory_equal(u.query, "x=1", u.query_len);
    assert_false(ckpt__url_split("https://", &u));
    assert_false(ckpt__url_split("/local/path", &u));
    char *r = ckpt__url_redact("https://alice:pw@h/x?X-Amz-Signature=abc&keep=1&token=zz#frag");
    assert_string_equal(r, "https://REDACTED@h/x?X-Amz-Signature=REDACTED&keep=1&token=REDACTED#frag");
    free(r);
    r = ckpt__url_redact("http://h/plain");
    assert_string_equal(r, "http://h/plain");
    free(r);
    /* The whole user part, a bare token included (libcurl sends it as a user
     * name), and one with an '@' of its own. */
    static const char *const tokens[][2] = {
        {"http://ghp_TOKEN@h:8/a/b.safetensors", "http://REDACTED@h:8/a/b.safetensors"},
        {"https://user:ghp_TOKEN@h/x", "https://REDACTED@h/x"},
        {"https://a@b:ghp_TOKEN@h/x@y", "https://REDACTED@h/x@y"},
        {"s3://bucket/key@x", "s3://bucket/key@x"},
        {"dir/a://ghp_TOKEN@b/c", "dir/a://ghp_TOKEN@b/c"}, /* a path: "dir/a" is no scheme */
        {"/local/model.safetensors", "/local/model.safetensors"},
    };
    for (size_t i = 0; i < sizeof tokens / sizeof *tokens; i++) {
        char out[128];
        assert_int_equal(ckpt_redact_name(tokens[i][0], out, sizeof out), strlen(tokens[i][1]));
        assert_string_equal(out, tokens[i][1]);
    }
    /* snprintf's contract: the whole length, the text cut to fit. */
    char small[8];
    assert_int_equal(ckpt_redact_name("http://ghp_TOKEN@h/x", small, sizeof small), 19);
    assert_string_equal(small, "http://");
    assert_int_equal(ckpt_redact_name("http://ghp_TOKEN@h/x", NULL, 0), 19);
    char *clean, *info;
    assert_true(ckpt__url_take_userinfo("http://a%40b:p%3Aw%zz@h:1/x", &clean, &info));
    assert_string_equal(clean, "http://h:1/x");
    assert_string_equal(info, "a@b:p:w%zz");
    free(clean);
    free(info);
    assert_true(ckpt__url_take_userinfo("http://h/x", &clean, &info));
    assert_null(info);
    free(clean);
    ckpt__buf b = {0};
    ckpt__url_encode_into(&b, "a b%20\xc3\xa9\"", 9, "+");
    ckpt__buf_puts(&b, "|");
    ckpt__url_encode_into(&b, "x+y", 3, "+");
    assert_string_equal(b.data, "a%20b%20%C3%A9%22|x%2By");
    free(b.data);
    /* A URL's directory ignores its query. */
    char *d = ckpt__path_dirname("https://h/a/b/index.json?sig=1/2");
    assert_string_equal(d, "https://h/a/b");
    free(d);
}

#ifdef CKPT_HAVE_CURL

/* ---- a server of the test's own ----------------------------------------------- */

enum { FILE_SIZE = (3 << 20) + 12345 };

typedef struct server {
    int listener, port;
    pthread_t thread;
    unsigned char *data;
    atomic_int requests, drops_left, fails_left, lie, stop;
    atomic_int trickle; /* bodies at 4 bytes a second */
    /* A server without byte ranges: every GET gets the whole file (200);
     * the first whole_drops_left downloads (GETs other than the open's
     * bytes=0-262143) drop after a third of the file. */
    atomic_int no_ranges, whole_drops_left;
    atomic_long bytes_sent;
    char linked_etag[80]; /* sent as X-Linked-Etag when set (before the server starts) */
} server;

static unsigned char pattern(uint64_t i) { return (unsigned char)(i * 131 + (i >> 11)); }

static void send_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        c += w, n -= (size_t)w;
    }
}

/* One connection: keep-alive requests until the client closes. */
static void serve(server *s, int fd) {
    char req[8192];
    size_t have = 0;
    for (;;) {
        char *end;
        while (!(end = memmem(req, have, "\r\n\r\n", 4))) {
            if (have == sizeof req) return;
            ssize_t r = recv(fd, req + have, sizeof req - have, 0);
            if (r <= 0) return;
            have += (size_t)r;
        }
        size_t len = (size_t)(end + 4 - req);
        char head[8192];
        memcpy(head, req, len);
        head[len] = '\0';
        memmove(req, req + len, have - len);
        have -= len;
        atomic_fetch_add(&s->requests, 1);
        bool is_head = !strncmp(head, "HEAD ", 5);
        unsigned long long a = 0, z = FILE_SIZE - 1;
        char *range = strcasestr(head, "\r\nRange: bytes=");
        bool ranged = range && sscanf(range + 15, "%llu-%llu", &a, &z) == 2;
        bool open_request = ranged && a == 0 && z == (256 << 10) - 1;
        if (atomic_load(&s->no_ranges)) ranged = false, a = 0, z = FILE_SIZE - 1;
        char out[512];
        if (strstr(head, " /missing ")) {
            int n = snprintf(out, sizeof out, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
            send_all(fd, out, (size_t)n);
            continue;
        }
        if (!is_head && atomic_load(&s->fails_left) > 0) {
            atomic_fetch_sub(&s->fails_left, 1);
            int n = snprintf(out, sizeof out, "HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy");
            send_all(fd, out, (size_t)n);
            continue;
        }
        if (z >= FILE_SIZE) z = FILE_SIZE - 1;
        unsigned long long shift = ranged && atomic_load(&s->lie) ? 1 : 0;
        char linked[128] = "";
        if (s->linked_etag[0]) snprintf(linked, sizeof linked, "X-Linked-Etag: %s\r\n", s->linked_etag);
        int n = ranged ? snprintf(out, sizeof out,
                                  "HTTP/1.1 206 Partial Content\r\nETag: \"v1\"\r\n%sContent-Length: %llu\r\n"
                                  "Content-Range: bytes %llu-%llu/%d\r\n\r\n",
                                  linked, z - a + 1, a + shift, z + shift, FILE_SIZE)
                         : snprintf(out, sizeof out, "HTTP/1.1 200 OK\r\nETag: \"v1\"\r\n%sContent-Length: %d\r\n\r\n",
                                    linked, FILE_SIZE);
        send_all(fd, out, (size_t)n);
        if (is_head) continue;
        size_t body = ranged ? (size_t)(z - a + 1) : FILE_SIZE;
        const unsigned char *from = s->data + (ranged ? a : 0);
        if (atomic_load(&s->trickle)) { /* honest bytes, 4 a second, until the client gives up */
            for (size_t k = 0; k < body && !atomic_load(&s->stop); k += 1) {
                if (send(fd, from + k, 1, MSG_NOSIGNAL) != 1) return;
                usleep(250000);
            }
            continue;
        }
        if (!ranged && !open_request && atomic_load(&s->whole_drops_left) > 0) {
            atomic_fetch_sub(&s->whole_drops_left, 1);
            send_all(fd, from, body / 3);
            atomic_fetch_add(&s->bytes_sent, (long)(body / 3));
            return;
        }
        if (ranged && a > 0 && atomic_load(&s->drops_left) > 0) {
            atomic_fetch_sub(&s->drops_left, 1);
            send_all(fd, from, body / 3);
            atomic_fetch_add(&s->bytes_sent, (long)(body / 3));
            return; /* the connection drops mid-body */
        }
        send_all(fd, from, body);
        atomic_fetch_add(&s->bytes_sent, (long)body);
    }
}

static void *conn_main(void *arg) {
    void **a = arg;
    serve(a[0], (int)(intptr_t)a[1]);
    close((int)(intptr_t)a[1]);
    free(arg);
    return NULL;
}

static void *server_main(void *arg) {
    server *s = arg;
    while (!atomic_load(&s->stop)) {
        int fd = accept(s->listener, NULL, NULL);
        if (fd < 0) continue;
        if (atomic_load(&s->stop)) {
            close(fd);
            break;
        }
        void **a = malloc(2 * sizeof *a);
        a[0] = s, a[1] = (void *)(intptr_t)fd;
        pthread_t t;
        pthread_create(&t, NULL, conn_main, a);
        pthread_detach(t);
    }
    return NULL;
}

static server *server_start(void) {
    server *s = calloc(1, sizeof *s);
    s->data = malloc(FILE_SIZE);
    for (uint64_t i = 0; i < FILE_SIZE; i++) s->data[i] = pattern(i);
    s->listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(s->listener, (struct sockaddr *)&addr, sizeof addr), 0);
    socklen_t l = sizeof addr;
    getsockname(s->listener, (struct sockaddr *)&addr, &l);
    s->port = ntohs(addr.sin_port);
    listen(s->listener, 64);
    pthread_create(&s->thread, NULL, server_main, s);
    return s;
}

static void server_stop(server *s) {
    atomic_store(&s->stop, 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0); /* wake accept() */
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    connect(fd, (struct sockaddr *)&addr, sizeof addr);
    close(fd);
    pthread_join(s->thread, NULL);
    close(s->listener);
    usleep(atomic_load(&s->trickle) ? 400000 : 100000); /* connection threads see their clients close */
    free(s->data);
    free(s);
}

static const char *url_of(server *s, const char *path) {
    static char buf[128];
    snprintf(buf, sizeof buf, "http://127.0.0.1:%d/%s", s->port, path);
    return buf;
}

static ckpt__source *open_remote(server *s, const ckpt__source_options *o) {
    ckpt__source *src = NULL;
    ckpt_error err;
    assert_int_equal(ckpt__source_open(url_of(s, "file.bin"), o, &src, &err), CKPT_OK);
    assert_int_equal(src->size, FILE_SIZE);
    return src;
}

static void check_pattern(const unsigned char *p, uint64_t off, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (p[i] != pattern(off + i)) fail_msg("byte %llu differs", (unsigned long long)(off + i));
}

/* ---- the HTTP kind ------------------------------------------------------------------ */

static void test_batches(void **state) {
    (void)state;
    server *s = server_start();
    ckpt__source_options o = CKPT__SOURCE_OPTIONS_DEFAULT;
    o.max_connections = 4;
    ckpt__source *src = open_remote(s, &o);
    assert_true(src->caps & CKPT__SRC_REMOTE);
    assert_int_equal(atomic_load(&s->requests), 1);
    /* Requests out of order, adjacent, overlapping, with small and large
     * holes, one inside the open's first bytes, one at the very end. */
    static const uint64_t spans[][2] = {{1000, 10},      {500000, 2 << 20}, {300000, 100000},
                                        {400000, 50000}, {460000, 40000},   {FILE_SIZE - 7, 7},
                                        {400100, 1000},  {2900000, 1},      {0, 0}};
    enum { N = sizeof spans / sizeof *spans };
    ckpt__read_req reqs[N];
    unsigned char *bufs[N];
    for (size_t i = 0; i < N; i++) {
        bufs[i] = malloc(spans[i][1] ? spans[i][1] : 1);
        reqs[i] = (ckpt__read_req){src, -1, spans[i][0], spans[i][1], spans[i][1], bufs[i], "t"};
    }
    ckpt_error err;
    assert_int_equal(ckpt__source_read_many(src, reqs, N, &err), CKPT_OK);
    for (size_t i = 0; i < N; i++) {
        check_pattern(bufs[i], spans[i][0], spans[i][1]);
        free(bufs[i]);
    }
    /* Past the end: truncated, naming where the file ends. */
    unsigned char b[16];
    assert_int_equal(ckpt__source_read(src, b, 16, FILE_SIZE - 8, &err), CKPT_E_TRUNCATED);
    assert_int_equal(err.offset, FILE_SIZE);
    ckpt__source_close(src);
    server_stop(s);
}

typedef struct reader_arg {
    ckpt__source *src;
    unsigned seed;
    int failures;
} reader_arg;

static void *reader_main(void *arg) {
    reader_arg *a = arg;
    unsigned char *buf = malloc(1 << 20);
    for (int k = 0; k < 20; k++) {
        a->seed = a->seed * 1103515245u + 12345u;
        uint64_t off = (a->seed >> 4) % (FILE_SIZE - (1 << 20)), n = 1 + (a->seed >> 8) % (1 << 20);
        ckpt_error err;
        if (ckpt__source_read(a->src, buf, n, off, &err) != CKPT_OK) a->failures++;
        else check_pattern(buf, off, n);
    }
    free(buf);
    return NULL;
}

static void test_threads_share_a_source(void **state) {
    (void)state;
    server *s = server_start();
    ckpt__source_options o = CKPT__SOURCE_OPTIONS_DEFAULT;
    o.max_connections = 3;
    ckpt__source *src = open_remote(s, &o);
    pthread_t t[4];
    reader_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (reader_arg){src, (unsigned)i * 7919u + 1, 0};
        pthread_create(&t[i], NULL, reader_main, &a[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].failures, 0);
    }
    ckpt__source_close(src);
    server_stop(s);
}

static void test_retries_resume(void **state) {
    (void)state;
    server *s = server_start();
    ckpt__source_options o = CKPT__SOURCE_OPTIONS_DEFAULT;
    o.max_connections = 1;
    ckpt__source *src = open_remote(s, &o);
    unsigned char *buf = malloc(FILE_SIZE);
    ckpt_error err;
    atomic_store(&s->drops_left, 1);
    atomic_store(&s->fails_left, 1);
    atomic_store(&s->bytes_sent, 0);
    assert_int_equal(ckpt__source_read(src, buf, FILE_SIZE - 300000, 300000, &err), CKPT_OK);
    check_pattern(buf, 300000, FILE_SIZE - 300000);
    /* Resumed, not restarted: a dropped third is not sent twice. */
    assert_true(atomic_load(&s->bytes_sent) < (long)(FILE_SIZE - 300000) * 11 / 10);
    ckpt__source_close(src);
    /* Without retries, the first failure is the answer. */
    o.retries = 0;
    src = open_remote(s, &o);
    atomic_store(&s->fails_left, 1);
    assert_code(ckpt__source_read(src, buf, 1 << 20, 1 << 20, &err), err, CKPT__D(HTTP_STATUS));
    assert_non_null(strstr(err.message, "HTTP 503"));
    assert_non_null(strstr(err.message, "bytes 1048576-2097151"));
    assert_non_null(strstr(err.path, "/file.bin"));
    /* A lying Content-Range: refused at once. */
    atomic_store(&s->lie, 1);
    assert_code(ckpt__source_read(src, buf, 4096, 1 << 21, &err), err, CKPT__D(BAD_RESPONSE));
    assert_non_null(strstr(err.message, "for a request of bytes 2097152-2101247"));
    ckpt__source_close(src);
    free(buf);
    server_stop(s);
}

static void test_missing_stat_and_cache(void **state) {
    (void)state;
    server *s = server_start();
    ckpt__source *src = NULL;
    ckpt_error err;
    assert_int_equal(ckpt__source_open(url_of(s, "missing"), NULL, &src, &err), CKPT_E_NOT_FOUND);
    assert_null(src);
    assert_int_equal(ckpt__source_stat(url_of(s, "file.bin"), NULL), CKPT__NAME_FILE);
    assert_int_equal(ckpt__source_stat(url_of(s, "missing"), NULL), CKPT__NAME_MISSING);
    assert_int_equal(ckpt__source_stat(url_of(s, "dir/"), NULL), CKPT__NAME_DIR);
    /* The cache: a whole read fills it; the next open reads it locally. */
    char *dir = scratch_dir();
    ckpt__source_options o = CKPT__SOURCE_OPTIONS_DEFAULT;
    o.cache_dir = dir;
    src = open_remote(s, &o);
    unsigned char *buf = malloc(FILE_SIZE);
    assert_int_equal(ckpt__source_read(src, buf, FILE_SIZE, 0, &err), CKPT_OK);
    ckpt__source_close(src);
    assert_int_equal(dir_entries(dir), 2); /* the copy and its stamp */
    int before = atomic_load(&s->requests);
    src = open_remote(s, &o);
    assert_true(src->caps & CKPT__SRC_FD);
    assert_string_equal(src->name, url_of(s, "file.bin"));
    memset(buf, 0, FILE_SIZE);
    assert_int_equal(ckpt__source_read(src, buf, FILE_SIZE, 0, &err), CKPT_OK);
    check_pattern(buf, 0, FILE_SIZE);
    assert_int_equal(atomic_load(&s->requests), before + 1);
    ckpt__source_close(src);
    free(buf);
    scratch_free(dir);
    server_stop(s);
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* A server trickling 4 bytes a second passes the read timeout (bytes do
 * come) but not the minimum speed; and retries stop at the retry deadline,
 * however many are allowed. */
static void test_minimum_speed(void **state) {
    (void)state;
    server *s = server_start();
    ckpt__source_options o = CKPT__SOURCE_OPTIONS_DEFAULT;
    o.max_connections = 1;
    o.read_timeout_ms = 5000;
    o.min_speed_time_ms = 1000;
    o.retries = 100;
    o.retry_deadline_ms = 2500;
    ckpt__source *src = open_remote(s, &o);
    atomic_store(&s->trickle, 1);
    unsigned char *buf = malloc(1 << 20);
    ckpt_error err;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_code(ckpt__source_read(src, buf, 1 << 20, 1 << 20, &err), err, CKPT__D(TIMEOUT));
    double took = seconds_since(&t0);
    /* The deadline, plus one attempt's window (and scheduling). */
    assert_true(took >= 2.0 && took < 6.0);
    assert_non_null(strstr(err.path, "/file.bin"));
    assert_non_null(strstr(err.message, "slower than the minimum speed of 1024 bytes/s"));
    assert_non_null(strstr(err.message, "retry deadline"));
    /* The byte reached: past the start, since each retry resumed. */
    assert_true(err.offset > (1 << 20) && err.offset < (1 << 20) + 64);
    /* Without a deadline, the retries bound it: 2 attempts of a window each. */
    o.retry_deadline_ms = 0;
    o.retries = 1;
    ckpt__source_close(src);
    atomic_store(&s->trickle, 0);
    src = open_remote(s, &o);
    atomic_store(&s->trickle, 1);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_code(ckpt__source_read(src, buf, 4096, 1 << 21, &err), err, CKPT__D(TIMEOUT));
    took = seconds_since(&t0);
    assert_true(took >= 2.0 && took < 5.0);
    assert_non_null(strstr(err.message, "after 1 retry"));
    ckpt__source_close(src);
    free(buf);
    server_stop(s);
}

/* ---- the cache ------------------------------------------------------------------------ */

/* Reads the whole file through a fresh source: true when it came from the
 * cache (a local descriptor), false when from the server; the bytes are
 * right either way. */
static bool load_whole(server *s, const ckpt__source_options *o) {
    ckpt__source *src = open_remote(s, o);
    bool cached = (src->caps & CKPT__SRC_FD) != 0;
    unsigned char *buf = malloc(FILE_SIZE);
    ckpt_error err;
    assert_int_equal(ckpt__source_read(src, buf, FILE_SIZE, 0, &err), CKPT_OK);
    check_pattern(buf, 0, FILE_SIZE);
    free(buf);
    ckpt__source_close(src);
    return cached;
}

/* The one copy in `dir` ("<hash>-file.bin"), and its stamp. */
static void cache_names(const char *dir, char copy[4096], char stamp[4096]) {
    DIR *d = opendir(dir);
    struct dirent *e;
    copy[0] = stamp[0] = '\0';
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n > 9 && !strcmp(e->d_name + n - 9, "-file.bin")) snprintf(copy, 4096, "%s/%s", dir, e->d_name);
        if (n > 6 && !strcmp(e->d_name + n - 6, ".stamp")) snprintf(stamp, 4096, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    assert_true(copy[0] && stamp[0]);
}

static mode_t mode_of(const char *path) {
    struct stat sb;
    assert_int_equal(lstat(path, &sb), 0);
    return sb.st_mode;
}

static void test_cache_permissions(void **state) {
    (void)state;
    server *s = server_start();
    char *root = scratch_dir();
    char dir[4096], copy[4096], stamp[4096];
    snprintf(dir, sizeof dir, "%s/new/cache", root);
    ckpt__source_options o = CKPT__SOURCE_OPTIONS_DEFAULT;
    o.cache_dir = dir;
    mode_t old = umask(0); /* whatever the umask would allow */
    assert_false(load_whole(s, &o));
    cache_names(dir, copy, stamp);
    assert_int_equal(mode_of(dir) & 07777, 0700);
    assert_int_equal(mode_of(in_dir(root, "new")) & 07777, 0700); /* a parent it made */
    assert_int_equal(mode_of(copy) & 07777, 0600);
    assert_int_equal(mode_of(stamp) & 07777, 0600);
    assert_true(load_whole(s, &o));
    /* An existing, wider directory is the user's choice: kept, its new files 0600. */
    snprintf(dir, sizeof dir, "%s/wide", root);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_false(load_whole(s, &o));
    cache_names(dir, copy, stamp);
    assert_int_equal(mode_of(dir) & 07777, 0755);
    assert_int_equal(mode_of(copy) & 07777, 0600);
    umask(old);
    /* A directory of another user is not used at all (root can make one). */
    if (geteuid() == 0) {
        snprintf(dir, sizeof dir, "%s/theirs", root);
        assert_int_equal(mkdir(dir, 0777), 0);
        assert_int_equal(chown(dir, 65534, 65534), 0);
        assert_false(load_whole(s, &o));
        assert_false(load_whole(s, &o));
        assert_int_equal(dir_entries(dir), 0);
    }
    scratch_free(root);
    server_stop(s);
}

/* A copy that is not what ckpt wrote is not used, nothing is written
 * through it, and its replacement is. */
static void test_cache_trust(void **state) {
    (void)state;
    server *s = server_start();
    char *root = scratch_dir();
    char dir[4096], copy[4096], stamp[4096];
    snprintf(dir, sizeof dir, "%s/cache", root);
    ckpt__source_options o = CKPT__SOURCE_OPTIONS_DEFAULT;
    o.cache_dir = dir;
    assert_false(load_whole(s, &o));
    assert_true(load_whole(s, &o));
    cache_names(dir, copy, stamp);
    /* A sentinel outside, of the copy's very size. */
    const char *sentinel = in_dir(root, "sentinel");
    unsigned char *other = calloc(1, FILE_SIZE);
    write_bytes(sentinel, other, FILE_SIZE);
    for (int tamper = 0; tamper < 8; tamper++) {
        switch (tamper) {
        case 0: assert_int_equal(truncate(copy, FILE_SIZE - 1), 0); break; /* cut short */
        case 7: /* cut short, then zeros up to the size a size check wants */
            assert_int_equal(truncate(copy, FILE_SIZE / 2), 0);
            assert_int_equal(truncate(copy, FILE_SIZE), 0);
            break;
        case 1: {                                                           /* one byte changed in place */
            FILE *f = fopen(copy, "r+b");
            fseek(f, FILE_SIZE / 2, SEEK_SET);
            fputc(~pattern(FILE_SIZE / 2) & 0xff, f);
            fclose(f);
            break;
        }
        case 2: /* a symlink to a file outside */
            assert_int_equal(unlink(copy), 0);
            assert_int_equal(symlink(sentinel, copy), 0);
            break;
        case 3: /* a FIFO: opening it for reading would block */
            assert_int_equal(unlink(copy), 0);
            assert_int_equal(mkfifo(copy, 0600), 0);
            break;
        case 4: /* a hard link to a file outside */
            assert_int_equal(unlink(copy), 0);
            assert_int_equal(link(sentinel, copy), 0);
            break;
        case 5: /* the stamp lost (and no SHA-256 from this server to check against) */
            assert_int_equal(unlink(stamp), 0);
            break;
        case 6: /* another user's file */
            if (geteuid() != 0) continue;
            assert_int_equal(chown(copy, 65534, 65534), 0);
            break;
        }
        assert_false(load_whole(s, &o)); /* read from the server… */
        assert_true(S_ISREG(mode_of(copy)));
        assert_true(load_whole(s, &o)); /* …and copied again */
        size_t n;
        char *back = read_all(sentinel, &n);
        assert_int_equal(n, FILE_SIZE);
        assert_memory_equal(back, other, FILE_SIZE);
        free(back);
        cache_names(dir, copy, stamp);
    }
    free(other);
    scratch_free(root);
    server_stop(s);
}

/* A server that states the SHA-256 (the Hub's X-Linked-Etag): a copy that
 * lost its stamp is checked against it; a server that states a wrong one
 * gets no copy. */
static void test_cache_digest(void **state) {
    (void)state;
    server *s = server_start();
    char hex[65];
    sha_hex(s->data, FILE_SIZE, hex);
    snprintf(s->linked_etag, sizeof s->linked_etag, "\"%s\"", hex);
    char *root = scratch_dir();
    char dir[4096], copy[4096], stamp[4096];
    snprintf(dir, sizeof dir, "%s/cache", root);
    ckpt__source_options o = CKPT__SOURCE_OPTIONS_DEFAULT;
    o.cache_dir = dir;
    assert_false(load_whole(s, &o));
    cache_names(dir, copy, stamp);
    size_t n;
    char *text = read_all(stamp, &n);
    assert_non_null(strstr(text, hex));
    free(text);
    /* Stamp lost, bytes intact: the SHA-256 vouches for them, and a new stamp is written. */
    assert_int_equal(unlink(stamp), 0);
    assert_true(load_whole(s, &o));
    assert_true(file_exists(stamp));
    /* Stamp lost, a byte changed: not used. */
    assert_int_equal(unlink(stamp), 0);
    FILE *f = fopen(copy, "r+b");
    fputc(~pattern(0) & 0xff, f);
    fclose(f);
    assert_false(load_whole(s, &o));
    assert_true(load_whole(s, &o));
    scratch_free(root);
    /* A server whose bytes are not what it states: nothing is kept. */
    root = scratch_dir();
    snprintf(dir, sizeof dir, "%s/cache", root);
    s->linked_etag[1] = s->linked_etag[1] == '0' ? '1' : '0';
    assert_false(load_whole(s, &o));
    assert_false(load_whole(s, &o));
    assert_int_equal(dir_entries(dir), 0);
    scratch_free(root);
    server_stop(s);
}

/* ---- a server without byte ranges --------------------------------------------------- */

typedef struct meter_log {
    atomic_int calls;
    atomic_ullong done, total;
} meter_log;

static int note_meter(uint64_t done, uint64_t total, void *user) {
    meter_log *l = user;
    atomic_fetch_add(&l->calls, 1);
    atomic_store(&l->done, done);
    atomic_store(&l->total, total);
    return 0;
}

typedef struct part_reader {
    ckpt__source *src;
    uint64_t off, len;
    ckpt_status st;
} part_reader;

static void *read_part(void *arg) {
    part_reader *p = arg;
    unsigned char *buf = malloc(p->len);
    ckpt_error err;
    p->st = ckpt__source_read(p->src, buf, p->len, p->off, &err);
    if (p->st == CKPT_OK) check_pattern(buf, p->off, p->len);
    free(buf);
    return NULL;
}

/* Refused without a cache directory (saying how to give one); with one,
 * the open reads only the first bytes, and the first read past them —
 * from several threads at once — downloads the file once, whole, into
 * the cache, from which every read then comes; a cut download starts over,
 * and one that keeps failing leaves nothing. */
static void test_no_ranges(void **state) {
    (void)state;
    server *s = server_start();
    atomic_store(&s->no_ranges, 1);
    ckpt__source_options o = CKPT__SOURCE_OPTIONS_DEFAULT;
    ckpt__source *src = NULL;
    ckpt_error err;
    assert_code(ckpt__source_open(url_of(s, "file.bin"), &o, &src, &err), err, CKPT__D(NO_RANGES));
    assert_non_null(strstr(err.message, "--cache-dir"));
    assert_non_null(strstr(err.message, "cache_dir="));
    assert_non_null(strstr(err.path, "/file.bin"));
    char *dir = scratch_dir();
    meter_log log = {0};
    ckpt__download_meter meter = {.fn = note_meter, .user = &log};
    pthread_mutex_init(&meter.lock, NULL);
    o.cache_dir = dir;
    o.meter = &meter;
    o.max_connections = 2;
    src = open_remote(s, &o);
    unsigned char head[1000];
    assert_int_equal(ckpt__source_read(src, head, sizeof head, 5000, &err), CKPT_OK);
    check_pattern(head, 5000, sizeof head);
    assert_int_equal(atomic_load(&s->requests), 2);
    assert_int_equal(dir_entries(dir), 0); /* nothing yet: the open's bytes served it */
    /* The first download is cut after a third: the retry starts over. */
    atomic_store(&s->whole_drops_left, 1);
    part_reader parts[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        parts[i] = (part_reader){src, (uint64_t)i * (FILE_SIZE / 4), FILE_SIZE / 4, CKPT_E_IO};
        pthread_create(&t[i], NULL, read_part, &parts[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(parts[i].st, CKPT_OK);
    }
    assert_int_equal(atomic_load(&s->requests), 4); /* the open, the cut download, its restart */
    assert_int_equal(atomic_load(&log.done), FILE_SIZE);
    assert_int_equal(atomic_load(&log.total), FILE_SIZE);
    assert_true(atomic_load(&log.calls) >= 2);
    assert_int_equal(dir_entries(dir), 2); /* the copy and its stamp */
    char copy[4096], stamp[4096];
    cache_names(dir, copy, stamp);
    ckpt__source_close(src);
    /* The next open reads the copy: one request. */
    assert_true(load_whole(s, &o));
    assert_int_equal(atomic_load(&s->requests), 5);
    /* A download that keeps failing: an error, and no copy under its name. */
    scratch_free(dir);
    dir = scratch_dir();
    o.cache_dir = dir;
    o.retries = 1;
    src = open_remote(s, &o);
    atomic_store(&s->whole_drops_left, 2);
    unsigned char *buf = malloc(FILE_SIZE);
    assert_code(ckpt__source_read(src, buf, FILE_SIZE, 0, &err), err, CKPT__D(NETWORK));
    assert_non_null(strstr(err.message, "the whole file"));
    assert_non_null(strstr(err.message, "after 1 retry"));
    assert_int_equal(dir_entries(dir), 0);
    ckpt__source_close(src);
    free(buf);
    pthread_mutex_destroy(&meter.lock);
    scratch_free(dir);
    server_stop(s);
}

#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_etag_sha256),
        cmocka_unit_test(test_content_range),
        cmocka_unit_test(test_headers_and_retry_after),
        cmocka_unit_test(test_urls),
        cmocka_unit_test(test_hmac_and_base64),
        cmocka_unit_test(test_store_xml),
#ifdef CKPT_HAVE_CURL
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_threads_share_a_source),
        cmocka_unit_test(test_retries_resume),
        cmocka_unit_test(test_missing_stat_and_cache),
        cmocka_unit_test(test_minimum_speed),
        cmocka_unit_test(test_cache_permissions),
        cmocka_unit_test(test_cache_trust),
        cmocka_unit_test(test_cache_digest),
        cmocka_unit_test(test_no_ranges),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
