/* rc-v2-object: PUT or GET one object over hipobj-rc-v2, the handshake of
 * S3 servers that answer a token on the object request with 501 and
 * X-Amz-Rdma-Protocol-Status: unsupported.
 *
 *   rc-v2-object put ENDPOINT BUCKET KEY INFILE
 *   rc-v2-object get ENDPOINT BUCKET KEY SIZE OUTFILE
 *
 * hipObject makes the header values of PREPARE, READY and CANCEL and checks
 * the answers (hipObjRcV2*); libcurl sends each one as a body-less POST
 * signed with CURLOPT_AWS_SIGV4, every x-amz-rdma-* header among the signed
 * ones. The bytes move by RDMA WRITE WITH IMMEDIATE: the server's into the
 * registered buffer for a GET, ours into the server's staging buffer for a
 * PUT, started while READY is open (the curl multi interface keeps READY
 * open while this thread posts the write). Every failure after PREPARE
 * sends the CANCEL hipObject says is owed, and the session always ends
 * with hipObjRcV2End.
 *
 * With RCV2_TRY_BINDING=1 it does what an application meeting all kinds of
 * servers does: it tries the binding exchange first (hipObjGet/hipObjPut,
 * as get-object.c and put-object.c) and switches to hipobj-rc-v2 only when
 * the object request is answered 501 with X-Amz-Rdma-Protocol-Status:
 * unsupported. Without it, it goes straight to hipobj-rc-v2.
 *
 * Credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY. NIC: HIPOBJ_NIC.
 * An https ENDPOINT is verified against AWS_CA_BUNDLE when set.
 * RCV2_GIVE_UP=after-prepare makes the program abandon the session once
 * PREPARE succeeded, as an application that is interrupted would: it then
 * sends the CANCEL and fails (the tests use it to see that path). */
#include "s3-request.h"

#include <time.h>

/* One control request's answer: status and the raw header block. */
struct answer {
    long status;
    char block[8192];
    size_t len;
    int overflow;
};

/* CURLOPT_HEADERFUNCTION: gathers the header block of the final response
 * (a new status line starts it over, so a 100 Continue leaves nothing). */
static size_t gather(char *line, size_t size, size_t n, void *userdata) {
    struct answer *a = userdata;
    size_t len = size * n;
    if (len >= 5 && strncmp(line, "HTTP/", 5) == 0) {
        a->len = 0;
        a->overflow = 0;
    }
    if (a->len + len > sizeof a->block) {
        a->overflow = 1;
    } else {
        memcpy(a->block + a->len, line, len);
        a->len += len;
    }
    return len;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* POSTs to ENDPOINT + path with the header lines `lines` (one per line,
 * as hipObject writes them), signed. With `session` set, the session's
 * write is started about 20 ms after the request has gone out, while the
 * request is open (a PUT's READY; a no-op for a GET). Returns 0 when an
 * answer came, -1 otherwise. */
static int control(const struct s3_request *r, const char *endpoint, const char *path, char *lines,
                   hipObjRcV2Session_t *session, struct answer *a, hipObjError_t *started) {
    char url[1200];
    snprintf(url, sizeof url, "%s%s", endpoint, path);
    struct curl_slist *h = NULL;
    for (char *line = strtok(lines, "\n"); line != NULL; line = strtok(NULL, "\n"))
        h = curl_slist_append(h, line);
    /* libcurl adds a form Content-Type to the empty POST after signing,
     * and leaves it unsigned; hiding it with "Content-Type:" would make
     * libcurl 7.88 sign a header it then does not send. */
    CURL *c = curl_easy_init();
    CURLM *m = curl_multi_init();
    if (c == NULL || m == NULL || h == NULL) {
        if (m != NULL) curl_multi_cleanup(m);
        if (c != NULL) curl_easy_cleanup(c);
        curl_slist_free_all(h);
        return -1;
    }
    memset(a, 0, sizeof *a);
    curl_easy_setopt(c, CURLOPT_URL, url);
    s3_tls(c);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, "aws:amz:us-east-1:s3");
    curl_easy_setopt(c, CURLOPT_USERPWD, r->userpwd);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, gather);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s3_discard);
    curl_multi_add_handle(m, c);
    int running = 1;
    double sent_at = -1;
    while (running) {
        if (curl_multi_perform(m, &running) != CURLM_OK) break;
        if (session != NULL && running) {
            long request_size = 0;
            curl_easy_getinfo(c, CURLINFO_REQUEST_SIZE, &request_size);
            if (request_size > 0 && sent_at < 0) sent_at = now_ms();
            if (sent_at >= 0 && now_ms() - sent_at >= 20) {
                *started = hipObjRcV2StartWrite(session);
                session = NULL;
            }
        }
        if (running) curl_multi_poll(m, NULL, 0, 5, NULL);
    }
    CURLcode rc = CURLE_OK;
    int left = 0;
    for (CURLMsg *msg = curl_multi_info_read(m, &left); msg != NULL; msg = curl_multi_info_read(m, &left))
        if (msg->msg == CURLMSG_DONE) rc = msg->data.result;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a->status);
    curl_multi_remove_handle(m, c);
    curl_multi_cleanup(m);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    if (rc != CURLE_OK) {
        fprintf(stderr, "POST %s: %s\n", path, curl_easy_strerror(rc));
        return -1;
    }
    if (a->overflow) {
        fprintf(stderr, "POST %s: the answer's headers do not fit\n", path);
        return -1;
    }
    return 0;
}

/* Sends the CANCEL the session owes, if it owes one, and ends it. */
static void give_up(const struct s3_request *r, const char *endpoint, hipObjRcV2Session_t *s) {
    char lines[HIPOBJ_RCV2_HEADERS_MAX];
    size_t len = sizeof lines;
    struct answer a;
    if (hipObjRcV2CancelHeaders(s, lines, &len).opError == hipObjSuccess && len > 0) {
        if (control(r, endpoint, HIPOBJ_RCV2_CANCEL_PATH, lines, NULL, &a, NULL) == 0)
            fprintf(stderr, "CANCEL sent: HTTP %ld\n", a.status);
    }
    hipObjRcV2End(s);
}

static int failed(const char *what, hipObjError_t e, long status) {
    fprintf(stderr, "%s: %s (HTTP %ld)\n", what, hipObjGetErrorString(e.opError), status);
    return -1;
}

/* One session: PREPARE, READY (with the PUT's write), the checks. Returns
 * the bytes moved, or -1 after reporting why. */
static long long transfer(const struct s3_request *r, const char *endpoint, const char *bucket, const char *key,
                          void *buf, size_t size, int op) {
    hipObjRcV2Session_t *s = NULL;
    hipObjError_t e = hipObjRcV2Begin(buf, size, 0, op, &s);
    if (e.opError != hipObjSuccess) return failed("hipObjRcV2Begin", e, 0);
    char lines[HIPOBJ_RCV2_HEADERS_MAX];
    size_t len = sizeof lines;
    struct answer a;
    e = hipObjRcV2PrepareHeaders(s, bucket, key, 0, lines, &len);
    if (e.opError != hipObjSuccess) {
        hipObjRcV2End(s);
        return failed("hipObjRcV2PrepareHeaders", e, 0);
    }
    if (control(r, endpoint, HIPOBJ_RCV2_PREPARE_PATH, lines, NULL, &a, NULL) != 0) {
        give_up(r, endpoint, s);
        return -1;
    }
    e = hipObjRcV2HandlePrepare(s, (int)a.status, a.block, a.len);
    if (e.opError != hipObjSuccess) {
        give_up(r, endpoint, s);
        return failed("PREPARE", e, a.status);
    }
    const char *give_up_at = getenv("RCV2_GIVE_UP");
    if (give_up_at != NULL && strcmp(give_up_at, "after-prepare") == 0) {
        fprintf(stderr, "giving up after PREPARE, as RCV2_GIVE_UP says\n");
        give_up(r, endpoint, s);
        return -1;
    }
    len = sizeof lines;
    e = hipObjRcV2ReadyHeaders(s, lines, &len);
    if (e.opError != hipObjSuccess) {
        give_up(r, endpoint, s);
        return failed("hipObjRcV2ReadyHeaders", e, 0);
    }
    hipObjError_t started = {hipObjSuccess, 0};
    if (control(r, endpoint, HIPOBJ_RCV2_READY_PATH, lines, s, &a, &started) != 0) {
        give_up(r, endpoint, s);
        return -1;
    }
    if (started.opError != hipObjSuccess) {
        /* The write could not be posted: the session is over, and the
         * CANCEL hipObject offers is harmless after READY's answer. */
        give_up(r, endpoint, s);
        return failed("hipObjRcV2StartWrite", started, a.status);
    }
    uint64_t moved = 0;
    e = hipObjRcV2HandleReady(s, (int)a.status, a.block, a.len, &moved);
    hipObjRcV2End(s);
    if (e.opError != hipObjSuccess) return failed("READY", e, a.status);
    return (long long)moved;
}

static int usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s put ENDPOINT BUCKET KEY INFILE\n"
            "       %s get ENDPOINT BUCKET KEY SIZE OUTFILE\n",
            argv0, argv0);
    return 2;
}

int main(int argc, char **argv) {
    int put;
    if (argc == 6 && strcmp(argv[1], "put") == 0)
        put = 1;
    else if (argc == 7 && strcmp(argv[1], "get") == 0)
        put = 0;
    else
        return usage(argv[0]);
    const char *endpoint = argv[2], *bucket = argv[3], *key = argv[4];
    size_t size = 0;
    char *buf = NULL;
    if (put) {
        FILE *f = fopen(argv[5], "rb");
        if (f == NULL || fseek(f, 0, SEEK_END) != 0) { perror(argv[5]); return 1; }
        long end = ftell(f);
        if (end <= 0 || (unsigned long)end > HIPOBJ_RCV2_MAX_SIZE) {
            fprintf(stderr, "%s: 1 to %ld bytes, please\n", argv[5], (long)HIPOBJ_RCV2_MAX_SIZE);
            return 1;
        }
        size = (size_t)end;
        buf = malloc(size);
        if (buf == NULL || fseek(f, 0, SEEK_SET) != 0 || fread(buf, 1, size, f) != size) { perror(argv[5]); return 1; }
        fclose(f);
    } else {
        size = strtoull(argv[5], NULL, 10);
        if (size == 0) { fprintf(stderr, "SIZE must be at least 1\n"); return 2; }
        buf = calloc(1, size);
        if (buf == NULL) { perror("calloc"); return 1; }
    }

    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (hipobj_start() != 0) return 1;
    hipObjError_t e = hipObjBufRegisterHost(buf, size);
    if (e.opError != hipObjSuccess) {
        fprintf(stderr, "hipObjBufRegisterHost: %s\n", hipObjGetErrorString(e.opError));
        return 1;
    }
    struct s3_request req;
    s3_setup(&req, put ? "PUT" : "GET", endpoint, bucket, key);
    long long moved = -1;
    const char *how = "hipobj-rc-v2";
    const char *try_binding = getenv("RCV2_TRY_BINDING");
    int v2 = 1;
    if (try_binding != NULL && strcmp(try_binding, "1") == 0) {
        hipObjOps_t ops = {s3_send, s3_recv};
        /* A PUT with a token goes only to a server seen to speak the
         * binding exchange (a plain one would store its empty body). */
        enum s3_speaks speaks = put ? s3_probe(endpoint, bucket, key) : S3_BINDING;
        if (speaks == S3_PLAIN || speaks == S3_PROBE_FAILED) {
            fprintf(stderr, "not sending a PutObject with a token: %s\n",
                    speaks == S3_PLAIN ? "the server does not speak the RDMA protocol" : "the probe failed");
            return 1;
        }
        if (speaks == S3_RC_V2) {
            req.status = HIPOBJ_RDMA_REPLY_NOT_IMPLEMENTED;
            req.unsupported = 1;
            e.opError = hipObjS3Error;
        } else {
            e = put ? hipObjPut(NULL, buf, size, 0, &ops, &req) : hipObjGet(NULL, buf, size, 0, &ops, &req);
        }
        if (e.opError == hipObjSuccess) {
            moved = (long long)size; /* hipObject checked the count */
            how = "the binding exchange";
            v2 = 0;
        } else if (e.opError == hipObjS3Error && req.status == HIPOBJ_RDMA_REPLY_NOT_IMPLEMENTED && req.unsupported) {
            printf("the server declined the binding exchange (HTTP 501, unsupported): switching to hipobj-rc-v2\n");
        } else {
            fprintf(stderr, "%s: %s (HTTP %ld)\n", put ? "hipObjPut" : "hipObjGet", hipObjGetErrorString(e.opError),
                    req.status);
            v2 = 0;
        }
    }
    if (v2)
        moved = transfer(&req, endpoint, bucket, key, buf, size, put ? HIPOBJ_RDMA_OP_PUT : HIPOBJ_RDMA_OP_GET);
    int rc = 0;
    if (moved < 0) {
        rc = 1;
    } else if (put) {
        printf("PUT %lld bytes over %s\n", moved, how);
    } else {
        FILE *f = fopen(argv[6], "wb");
        if (f == NULL || fwrite(buf, 1, (size_t)moved, f) != (size_t)moved || fclose(f) != 0) {
            perror(argv[6]);
            rc = 1;
        } else {
            printf("GET %lld bytes over %s\n", moved, how);
        }
    }
    hipObjBufDeregister(buf);
    hipObjShutdown();
    free(buf);
    curl_global_cleanup();
    return rc;
}
