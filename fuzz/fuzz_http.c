/*
 * fuzz_http.c — arbitrary bytes sent as one HTTP connection to a real kiln
 * server (no model attached: generation routes answer 503) on 127.0.0.1.
 * Exercises routing, methods, API keys, body limits and libmicrohttpd's
 * request parsing as kiln configures it; the server must answer or close,
 * never crash, and stop cleanly after each input.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/srv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    srv_config c = srv_config_default();
    c.port = 0;
    c.max_body = 4096;
    c.api_key = size && (data[0] & 1) ? "k" : NULL; /* half the inputs need a key */
    srv_server *s;
    kiln_err err;
    if (srv_start(&c, &s, &err) != KILN_OK) return 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)srv_port(s))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        size_t off = 0;
        while (off < size) {
            ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
            if (n <= 0) break;
            off += (size_t)n;
        }
        shutdown(fd, SHUT_WR);
        char buf[4096];
        struct pollfd p = {.fd = fd, .events = POLLIN};
        while (poll(&p, 1, 2000) > 0 && recv(fd, buf, sizeof buf, 0) > 0) {
        }
    }
    if (fd >= 0) close(fd);
    srv_quiesce(s);
    srv_stop(s);
    return 0;
}
