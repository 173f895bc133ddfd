/* One signed S3 request with libcurl, shaped for hipObject's callbacks:
 * the token goes in x-amz-rdma-token, the body is empty, the payload is
 * UNSIGNED-PAYLOAD, and the response's x-amz-rdma-reply is kept for
 * recvReply. Shared by get-object.c, put-object.c and rc-v2-object.c. */
#pragma once

#include <curl/curl.h>
#include <hipobj.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct s3_request {
    const char *method;   /* "GET" or "PUT" */
    char url[1024];
    char userpwd[512];
    char reply[512];      /* the last x-amz-rdma-reply value */
    size_t reply_len;     /* 0: the response had none */
    long status;          /* the last HTTP status */
    unsigned long long bytes; /* x-amz-rdma-bytes-transferred */
    int unsupported;      /* x-amz-rdma-protocol-status: unsupported */
    const char *range;    /* a Range header value, or NULL */
    int spoke;            /* an x-amz-rdma-reply other than 501 came back */
    int probe;            /* s3_probe's request: ends at the first such reply */
};

static size_t s3_header(char *line, size_t size, size_t n, void *userdata) {
    struct s3_request *r = userdata;
    size_t len = size * n;
    static const char reply[] = "x-amz-rdma-reply:";
    static const char bytes[] = "x-amz-rdma-bytes-transferred:";
    static const char status[] = "x-amz-rdma-protocol-status:";
    if (len > sizeof reply - 1 && strncasecmp(line, reply, sizeof reply - 1) == 0) {
        const char *v = line + sizeof reply - 1;
        size_t vlen = len - (sizeof reply - 1);
        while (vlen > 0 && (*v == ' ' || *v == '\t')) { v++; vlen--; }
        while (vlen > 0 && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' ')) vlen--;
        if (vlen < sizeof r->reply) {
            memcpy(r->reply, v, vlen);
            r->reply_len = vlen;
        }
        if (vlen > 0 && !(vlen >= 3 && strncmp(v, "501", 3) == 0)) r->spoke = 1;
    } else if (len > sizeof bytes - 1 && strncasecmp(line, bytes, sizeof bytes - 1) == 0) {
        r->bytes = strtoull(line + sizeof bytes - 1, NULL, 10);
    } else if (len > sizeof status - 1 && strncasecmp(line, status, sizeof status - 1) == 0) {
        const char *v = line + sizeof status - 1;
        while (*v == ' ' || *v == '\t') v++;
        r->unsupported = strncasecmp(v, "unsupported", 11) == 0;
    }
    return len;
}

static size_t s3_discard(char *data, size_t size, size_t n, void *userdata) {
    (void)data;
    (void)userdata;
    return size * n;
}

static size_t s3_no_body(char *buf, size_t size, size_t n, void *userdata) {
    (void)buf;
    (void)size;
    (void)n;
    (void)userdata;
    return 0;
}

/* https: the server's certificate is checked against the PEM file that
 * $AWS_CA_BUNDLE names (as the AWS CLI does), else against libcurl's
 * default CA store. Verification is never switched off. */
static void s3_tls(CURL *c) {
    const char *ca = getenv("AWS_CA_BUNDLE");
    if (ca != NULL && *ca != '\0') curl_easy_setopt(c, CURLOPT_CAINFO, ca);
}

/* hipObjOps_t::sendRequest: one signed request carrying the token. */
static int s3_send(void *ctx, const char *token, size_t token_len) {
    struct s3_request *r = ctx;
    char header[160];
    if (token_len > 100) return -1;
    snprintf(header, sizeof header, "x-amz-rdma-token: %.*s", (int)token_len, token);
    CURL *c = curl_easy_init();
    if (c == NULL) return -1;
    struct curl_slist *h = NULL;
    h = curl_slist_append(h, header);
    h = curl_slist_append(h, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    char range[96];
    if (r->range != NULL) {
        snprintf(range, sizeof range, "Range: %s", r->range);
        h = curl_slist_append(h, range);
    }
    curl_easy_setopt(c, CURLOPT_URL, r->url);
    s3_tls(c);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, "aws:amz:us-east-1:s3");
    curl_easy_setopt(c, CURLOPT_USERPWD, r->userpwd);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, s3_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s3_discard);
    if (strcmp(r->method, "PUT") == 0) {
        /* The bytes go by RDMA: an empty body. */
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, s3_no_body);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)0);
    }
    r->reply_len = 0;
    r->unsupported = 0;
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK) {
        fprintf(stderr, "request failed: %s\n", curl_easy_strerror(rc));
        return -1;
    }
    return 0;
}

/* hipObjOps_t::recvReply: the response's x-amz-rdma-reply, if it had one. */
static int s3_recv(void *ctx, char *reply, size_t *reply_len) {
    struct s3_request *r = ctx;
    if (r->probe && r->spoke) return -1; /* answered: no second request */
    if (r->reply_len == 0 || r->reply_len > *reply_len) {
        fprintf(stderr, "HTTP %ld without a usable x-amz-rdma-reply\n", r->status);
        return -1;
    }
    memcpy(reply, r->reply, r->reply_len);
    *reply_len = r->reply_len;
    return 0;
}

/* Fills in the URL and credentials; exits with a message when they are missing. */
static void s3_setup(struct s3_request *r, const char *method, const char *endpoint, const char *bucket,
                     const char *key) {
    const char *ak = getenv("AWS_ACCESS_KEY_ID");
    const char *sk = getenv("AWS_SECRET_ACCESS_KEY");
    if (ak == NULL || sk == NULL) {
        fprintf(stderr, "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY\n");
        exit(2);
    }
    memset(r, 0, sizeof *r);
    r->method = method;
    /* The key percent-encoded, '/' and unreserved characters kept, as
     * SigV4's canonical URI has it. */
    char path[3 * 256 + 1];
    size_t n = 0;
    const unsigned char *k = (const unsigned char *)key;
    for (; *k != '\0' && n + 4 < sizeof path; k++) {
        if ((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || (*k >= '0' && *k <= '9') ||
            strchr("-._~/", *k) != NULL)
            path[n++] = (char)*k;
        else
            n += (size_t)snprintf(path + n, sizeof path - n, "%%%02X", *k);
    }
    path[n] = '\0';
    if (*k != '\0') {
        fprintf(stderr, "the key is too long for this example\n");
        exit(2);
    }
    snprintf(r->url, sizeof r->url, "%s/%s/%s", endpoint, bucket, path);
    snprintf(r->userpwd, sizeof r->userpwd, "%s:%s", ak, sk);
}

/* What s3_probe found. */
enum s3_speaks { S3_PROBE_FAILED = -1, S3_PLAIN = 0, S3_BINDING = 1, S3_RC_V2 = 2 };

/* A PutObject with a token has no body: a server that ignores the token
 * stores the empty body, replacing the object (docs/protocol.md, "A token
 * never harms a server that ignores it"). So before the first write to an
 * endpoint, ask with a request no server stores: a one-byte ranged
 * GetObject of the key with a token (hipObjGet into a buffer of its own).
 * S3_BINDING: an x-amz-rdma-reply other than 501 came back (a 409 binding
 * round, or the byte moved); S3_RC_V2: 501 with
 * x-amz-rdma-protocol-status: unsupported; S3_PLAIN: an answer without a
 * reply (the byte, 404, 416): write over plain HTTP or not at all;
 * S3_PROBE_FAILED: no answer, or the credentials were refused. */
static inline enum s3_speaks s3_probe(const char *endpoint, const char *bucket, const char *key) {
    struct s3_request r;
    s3_setup(&r, "GET", endpoint, bucket, key);
    r.range = "bytes=0-0";
    r.probe = 1;
    char *probe = malloc(64);
    if (probe == NULL) return S3_PROBE_FAILED;
    if (hipObjBufRegisterHost(probe, 64).opError != hipObjSuccess) {
        free(probe);
        return S3_PROBE_FAILED;
    }
    hipObjOps_t ops = {s3_send, s3_recv};
    /* Its result is not the question; what came back is. */
    (void)hipObjGet(NULL, probe, 1, 0, &ops, &r);
    hipObjBufDeregister(probe);
    free(probe);
    if (r.spoke) return S3_BINDING;
    /* elbencho turns the 501 of a ranged GET into 416 and keeps the header. */
    if (r.unsupported) return S3_RC_V2;
    if (r.status == 0 || r.status == 401 || r.status == 403 ||
        (r.status >= 500 && r.status != HIPOBJ_RDMA_REPLY_NOT_IMPLEMENTED)) {
        fprintf(stderr, "the probe GET got %s (check the endpoint and the credentials)\n",
                r.status == 0 ? "no answer" : "an error status");
        return S3_PROBE_FAILED;
    }
    return S3_PLAIN;
}

/* Starts hipObject on the NIC $HIPOBJ_NIC names (default: the soft NIC). */
static int hipobj_start(void) {
    hipObjConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gpuDevice = -1;
    cfg.nicHint = getenv("HIPOBJ_NIC") != NULL ? getenv("HIPOBJ_NIC") : "softroce0";
    hipObjError_t e = hipObjInit(&cfg);
    if (e.opError != hipObjSuccess) {
        fprintf(stderr, "hipObjInit: %s\n", hipObjGetErrorString(e.opError));
        return -1;
    }
    return 0;
}
