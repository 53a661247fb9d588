/* TLS tunnel for hiredis (queue/tls.h). */
#include "queue/tls.h"

#ifndef CPT_HAVE_TLS

int cpt_tls_available(void) { return 0; }

void cpt_tls_session_end(cpt_tls_session *s) { (void)s; }

int cpt_tls_connect(const char *host, int port, const char *ca_file, int timeout_ms, int *fd, cpt_tls_session **s,
                    cpt_err *err) {
    (void)ca_file, (void)timeout_ms, (void)fd;
    *s = NULL;
    cpt_errf(err, "rediss://%s:%d: this cpt was built without OpenSSL (install libssl-dev and rebuild)", host, port);
    return -2;
}

#else

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int cpt_tls_available(void) { return 1; }

typedef struct cpt_tls_session {
    SSL_CTX *ctx;
    SSL *ssl;
    int net;   /* the TCP socket under the TLS session */
    int local; /* our end of the socket pair; hiredis holds the other */
    pthread_t thread;
} pump;

/* Releases the TLS session and both sockets (the struct itself stays for the join). */
static void pump_close(pump *p) {
    if (p->ssl) SSL_free(p->ssl);
    if (p->ctx) SSL_CTX_free(p->ctx);
    if (p->net >= 0) close(p->net);
    if (p->local >= 0) close(p->local);
    p->ssl = NULL, p->ctx = NULL, p->net = p->local = -1;
}

static void pump_free(pump *p) {
    pump_close(p);
    free(p);
}

void cpt_tls_session_end(cpt_tls_session *s) {
    if (!s) return;
    pthread_join(s->thread, NULL);
    free(s);
}

static int send_all(int fd, const char *b, size_t n) {
    while (n) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        b += k, n -= (size_t)k;
    }
    return 0;
}

/* Waits until the TCP socket can do what OpenSSL asked for (e: SSL_ERROR_WANT_READ / _WANT_WRITE); 0, or -1 on an
 * error or when hiredis closed its end meanwhile (a command that timed out must not leave the thread waiting on a
 * peer that never reads). */
static int wait_net(const pump *p, int e) {
    struct pollfd pf[2] = {{.fd = p->net, .events = e == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN},
                           {.fd = p->local, .events = 0}};
    for (;;) {
        int r = poll(pf, 2, -1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 || (pf[1].revents & (POLLHUP | POLLERR))) return -1;
        if (pf[0].revents) return 0;
    }
}

/* The socket is non-blocking: a write that would block waits and is retried with the same bytes. */
static int ssl_write_all(const pump *p, const char *b, size_t n) {
    while (n) {
        int k = SSL_write(p->ssl, b, n > 1 << 30 ? 1 << 30 : (int)n);
        if (k <= 0) {
            int e = SSL_get_error(p->ssl, k);
            if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) && wait_net(p, e) == 0) continue;
            return -1;
        }
        b += k, n -= (size_t)k;
    }
    return 0;
}

/* Relays bytes both ways until one side closes or fails. The TCP socket is non-blocking, so a read that finds
 * only TLS records without data (session tickets) returns to poll instead of waiting while hiredis writes. */
static void *pump_main(void *arg) {
    pump *p = arg;
    sigset_t pipe_set; /* a write to a closed TCP peer inside OpenSSL must not kill the process */
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
    char buf[16384];
    for (;;) {
        int net_ready = SSL_pending(p->ssl) > 0;
        if (!net_ready) {
            struct pollfd pf[2] = {{.fd = p->local, .events = POLLIN}, {.fd = p->net, .events = POLLIN}};
            if (poll(pf, 2, -1) < 0) {
                if (errno == EINTR) continue;
                break;
            }
            if (pf[0].revents) {
                ssize_t n = read(p->local, buf, sizeof buf);
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0 || ssl_write_all(p, buf, (size_t)n)) break;
            }
            net_ready = pf[1].revents != 0;
        }
        if (!net_ready) continue;
        int n = SSL_read(p->ssl, buf, sizeof buf);
        if (n <= 0) {
            int e = SSL_get_error(p->ssl, n);
            if (e == SSL_ERROR_WANT_READ) continue;
            if (e == SSL_ERROR_WANT_WRITE && wait_net(p, e) == 0) continue;
            break;
        }
        if (send_all(p->local, buf, (size_t)n)) break;
    }
    SSL_shutdown(p->ssl); /* best effort close_notify */
    pump_close(p);
    OPENSSL_thread_stop(); /* this thread's OpenSSL state, freed here rather than by a destructor at exit */
    return NULL;
}

/* A TCP connection to host:port within timeout_ms; -1 with err on failure. */
static int tcp_connect(const char *host, int port, int timeout_ms, cpt_err *err) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc) return cpt_errf(err, "rediss://%s:%d: %s", host, port, gai_strerror(rc));
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
            cpt_errno(err, "rediss://%s:%d: connect", host, port);
            close(fd);
            fd = -1;
            continue;
        }
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int so = 0;
        socklen_t sl = sizeof so;
        int pr;
        while ((pr = poll(&pf, 1, timeout_ms)) < 0 && errno == EINTR) {}
        if (pr <= 0) {
            cpt_errf(err, "rediss://%s:%d: connect timed out after %d ms", host, port, timeout_ms);
        } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) != 0 || so != 0) {
            errno = so;
            cpt_errno(err, "rediss://%s:%d: connect", host, port);
        } else {
            break;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) return -1;
    int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    /* a peer that vanishes is noticed in about half a minute, also while the pump waits */
    int on = 1, idle = 15, intvl = 5, cnt = 3;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    return fd;
}

static void set_io_timeout(int fd, int ms) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static void ssl_error_text(char *out, size_t cap) {
    unsigned long e = ERR_get_error();
    if (e) ERR_error_string_n(e, out, cap);
    else snprintf(out, cap, "connection closed during the handshake");
    ERR_clear_error();
}

int cpt_tls_connect(const char *host, int port, const char *ca_file, int timeout_ms, int *fd, cpt_tls_session **s,
                    cpt_err *err) {
    *fd = -1;
    *s = NULL;
    pump *p = calloc(1, sizeof *p);
    if (!p) return cpt_errf(err, "rediss://%s:%d: out of memory", host, port);
    p->net = p->local = -1;
    char why[256];
    if (!(p->ctx = SSL_CTX_new(TLS_client_method()))) {
        ssl_error_text(why, sizeof why);
        pump_free(p);
        cpt_errf(err, "rediss://%s:%d: TLS setup: %s", host, port, why);
        return -2;
    }
    SSL_CTX_set_min_proto_version(p->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(p->ctx, SSL_VERIFY_PEER, NULL);
    int ca_ok = ca_file && ca_file[0] ? SSL_CTX_load_verify_locations(p->ctx, ca_file, NULL)
                                      : SSL_CTX_set_default_verify_paths(p->ctx);
    if (ca_ok != 1) {
        ssl_error_text(why, sizeof why);
        pump_free(p);
        cpt_errf(err, "rediss://%s:%d: queue.tls_ca %s: %s", host, port, ca_file && ca_file[0] ? ca_file : "(system)", why);
        return -2;
    }
    if ((p->net = tcp_connect(host, port, timeout_ms, err)) < 0) {
        pump_free(p);
        return -1;
    }
    if (!(p->ssl = SSL_new(p->ctx)) || SSL_set_fd(p->ssl, p->net) != 1) {
        pump_free(p);
        cpt_errf(err, "rediss://%s:%d: TLS setup failed", host, port);
        return -2;
    }
    unsigned char addr[16];
    int is_ip = inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1;
    X509_VERIFY_PARAM *vp = SSL_get0_param(p->ssl);
    if (is_ip) {
        X509_VERIFY_PARAM_set1_ip_asc(vp, host);
    } else {
        SSL_set_tlsext_host_name(p->ssl, host);
        SSL_set1_host(p->ssl, host);
    }
    set_io_timeout(p->net, timeout_ms);
    if (SSL_connect(p->ssl) != 1) {
        long v = SSL_get_verify_result(p->ssl);
        if (v != X509_V_OK) {
            cpt_errf(err, "rediss://%s:%d: the server's TLS certificate is not trusted: %s (queue.tls_ca = \"%s\" must "
                     "be the CA that signed it, and the certificate must name %s)", host, port,
                     X509_verify_cert_error_string(v), ca_file ? ca_file : "", host);
            ERR_clear_error();
            pump_free(p);
            return -2;
        }
        ssl_error_text(why, sizeof why);
        pump_free(p);
        cpt_errf(err, "rediss://%s:%d: TLS handshake failed: %s (does the server speak TLS on this port?)", host,
                 port, why);
        return -1;
    }
    set_io_timeout(p->net, 0);
    fcntl(p->net, F_SETFL, fcntl(p->net, F_GETFL) | O_NONBLOCK);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        cpt_errno(err, "rediss://%s:%d: socketpair", host, port);
        pump_free(p);
        return -1;
    }
    p->local = sv[0];
    int rc = pthread_create(&p->thread, NULL, pump_main, p);
    if (rc != 0) {
        close(sv[1]);
        pump_free(p);
        errno = rc;
        return cpt_errno(err, "rediss://%s:%d: starting the TLS thread", host, port);
    }
    *fd = sv[1];
    *s = p;
    return 0;
}

#endif
