/* TLS for Redis connections that cross hosts (rediss:// URLs, docs/queue.md "TLS").
 *
 * Debian 12's hiredis (0.14) has no TLS, so a TLS connection is an OpenSSL session that a pump thread relays to one
 * end of a socket pair; hiredis gets the other end (redisConnectFd) and speaks plain RESP on it. The thread ends,
 * closing the session and both sockets, when either side closes. The server's certificate is verified against
 * ca_file (or the system's CAs when ca_file is empty) and must name host (DNS name or IP address). */
#ifndef CPT_QUEUE_TLS_H
#define CPT_QUEUE_TLS_H

#include "core/error.h"

typedef struct cpt_tls_session cpt_tls_session;

/* 1 when this build has TLS (OpenSSL found at configure time). */
int cpt_tls_available(void);

/* Connects to host:port, completes the TLS handshake within timeout_ms and returns in *fd the local end for hiredis
 * and in *s the session (its relay thread). Returns 0; -1 on a network error worth retrying; -2 on an error that
 * retrying cannot fix (an untrusted or mismatched certificate, an unreadable ca_file, a build without TLS). Messages
 * name host:port and the file. */
int cpt_tls_connect(const char *host, int port, const char *ca_file, int timeout_ms, int *fd, cpt_tls_session **s,
                    cpt_err *err);

/* Once the caller has closed *fd (redisFree): waits for the relay thread, which ends at that close, and frees the
 * session. Joining matters: a thread still leaving while the process exits races OpenSSL's exit-time cleanup. */
void cpt_tls_session_end(cpt_tls_session *s);

#endif
