/* C misuse of libhipobj, built and run under AddressSanitizer and
 * UndefinedBehaviorSanitizer (scripts/sanitizers.sh) and under Valgrind:
 * every mistake below must give its defined code and no sanitizer report.
 *
 *   - NULL for every pointer argument, before and after init;
 *   - double deregistration;
 *   - every call after shutdown, with buffers still registered and a token
 *     still held;
 *   - a heap buffer freed while registered, then deregistered: the library
 *     must not touch the freed memory (ASan reports any access to it);
 *   - transfer callbacks that fail, or report more reply bytes than the
 *     buffer they were given;
 *   - init/shutdown cycles (argument: how many; default 3).
 *
 * Needs a NIC: HIPOBJ_TEST_NIC names it (softroce0 in CI). Exits non-zero
 * on the first wrong code, with every failure listed on stderr. */
#include <hipobj.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define EXPECT(what, got, want)                                                            \
    do {                                                                                   \
        int g_ = (int)(got), w_ = (int)(want);                                             \
        if (g_ != w_) {                                                                    \
            fprintf(stderr, "FAIL %s:%d %s: got %d (%s), want %d\n", __FILE__, __LINE__, \
                    what, g_, hipObjGetErrorString((hipObjOpError_t)g_), w_);              \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

static int send_ok(void *ctx, const char *token, size_t len) {
    (void)ctx;
    return (token != NULL && strlen(token) == len) ? 0 : -1;
}

static int send_fail(void *ctx, const char *token, size_t len) {
    (void)ctx;
    (void)token;
    (void)len;
    return -1;
}

static int recv_fail(void *ctx, char *reply, size_t *len) {
    (void)ctx;
    (void)reply;
    (void)len;
    return -5;
}

/* Claims far more bytes than the buffer it was handed. */
static int recv_overlong(void *ctx, char *reply, size_t *len) {
    (void)ctx;
    memcpy(reply, "200", 3);
    *len = *len + 4096;
    return 0;
}

static int recv_junk(void *ctx, char *reply, size_t *len) {
    (void)ctx;
    memcpy(reply, "2\0x", 3);
    *len = 3;
    return 0;
}

/* A success the client has no proof for: no binding, no RDMA. */
static int recv_200(void *ctx, char *reply, size_t *len) {
    (void)ctx;
    memcpy(reply, "200", 3);
    *len = 3;
    return 0;
}

static int recv_501(void *ctx, char *reply, size_t *len) {
    (void)ctx;
    memcpy(reply, "501", 3);
    *len = 3;
    return 0;
}

/* Every pointer argument NULL; `inited` says whether the library is up. */
static void nulls(int inited) {
    int code = 0;
    char ip[16];
    hipObjOps_t ops = {send_ok, recv_200};
    hipObjOps_t no_send = {NULL, recv_200};
    hipObjOps_t no_recv = {send_ok, NULL};
    char probe[64];
    EXPECT("init NULL", hipObjInit(NULL).opError, hipObjInvalidValue);
    EXPECT("register NULL", hipObjBufRegister(NULL, 64).opError, hipObjInvalidValue);
    EXPECT("register host NULL", hipObjBufRegisterHost(NULL, 64).opError, hipObjInvalidValue);
    EXPECT("deregister NULL", hipObjBufDeregister(NULL).opError, hipObjInvalidValue);
    EXPECT("get NULL buf", hipObjGet(NULL, NULL, 64, 0, &ops, NULL).opError, hipObjInvalidValue);
    EXPECT("get NULL ops", hipObjGet(NULL, probe, 64, 0, NULL, NULL).opError, hipObjInvalidValue);
    EXPECT("get no send", hipObjGet(NULL, probe, 64, 0, &no_send, NULL).opError, hipObjInvalidValue);
    EXPECT("get no recv", hipObjGet(NULL, probe, 64, 0, &no_recv, NULL).opError, hipObjInvalidValue);
    EXPECT("put NULL buf", hipObjPut(NULL, NULL, 64, 0, &ops, NULL).opError, hipObjInvalidValue);
    EXPECT("put NULL ops", hipObjPut(NULL, probe, 64, 0, NULL, NULL).opError, hipObjInvalidValue);
    EXPECT("put no send", hipObjPut(NULL, probe, 64, 0, &no_send, NULL).opError, hipObjInvalidValue);
    EXPECT("sync NULL", hipObjBufSync(NULL, 64, 0, HIPOBJ_SYNC_TO_HOST).opError, hipObjInvalidValue);
    char *token = (char *)probe;
    EXPECT("token NULL buf", hipObjGetRdmaToken(NULL, 64, HIPOBJ_RDMA_OP_GET, &token).opError,
           hipObjInvalidValue);
    EXPECT("token NULL buf leaves out", token == (char *)probe, 1);
    EXPECT("token NULL out", hipObjGetRdmaToken(probe, 64, HIPOBJ_RDMA_OP_GET, NULL).opError,
           hipObjInvalidValue);
    EXPECT("put token NULL", hipObjPutRdmaToken(NULL).opError, hipObjInvalidValue);
    EXPECT("parse NULL reply", hipObjParseRdmaReply(NULL, 3, &code).opError, hipObjInvalidValue);
    EXPECT("parse NULL code", hipObjParseRdmaReply("200", 3, NULL).opError, hipObjInvalidValue);
    EXPECT("handle NULL reply", hipObjHandleRdmaReply(NULL, 3, &code).opError, hipObjInvalidValue);
    EXPECT("handle NULL code", hipObjHandleRdmaReply("200", 3, NULL).opError, hipObjInvalidValue);
    EXPECT("nic NULL token", hipObjTokenClientNic(NULL, ip, sizeof ip).opError, hipObjInvalidValue);
    EXPECT("nic NULL out", hipObjTokenClientNic("00", NULL, 16).opError, hipObjInvalidValue);
    EXPECT("version all NULL", hipObjGetVersion(NULL, NULL, NULL).opError, hipObjSuccess);
    hipObjRcV2Session_t *s = (hipObjRcV2Session_t *)probe;
    size_t len = sizeof probe;
    uint64_t moved = 7;
    EXPECT("v2 begin NULL buf", hipObjRcV2Begin(NULL, 64, 0, HIPOBJ_RDMA_OP_GET, &s).opError, hipObjInvalidValue);
    EXPECT("v2 begin NULL buf leaves out", s == (hipObjRcV2Session_t *)probe, 1);
    EXPECT("v2 begin NULL out", hipObjRcV2Begin(probe, 64, 0, HIPOBJ_RDMA_OP_GET, NULL).opError, hipObjInvalidValue);
    EXPECT("v2 begin negative offset", hipObjRcV2Begin(probe, 64, -1, HIPOBJ_RDMA_OP_GET, &s).opError,
           hipObjInvalidValue);
    EXPECT("v2 prepare NULL session", hipObjRcV2PrepareHeaders(NULL, "b", "k", 0, probe, &len).opError,
           hipObjInvalidValue);
    EXPECT("v2 handle prepare NULL session", hipObjRcV2HandlePrepare(NULL, 200, probe, 4).opError, hipObjInvalidValue);
    EXPECT("v2 ready NULL session", hipObjRcV2ReadyHeaders(NULL, probe, &len).opError, hipObjInvalidValue);
    EXPECT("v2 start NULL session", hipObjRcV2StartWrite(NULL).opError, hipObjInvalidValue);
    EXPECT("v2 handle ready NULL session", hipObjRcV2HandleReady(NULL, 200, probe, 4, &moved).opError,
           hipObjInvalidValue);
    EXPECT("v2 cancel NULL session", hipObjRcV2CancelHeaders(NULL, probe, &len).opError, hipObjInvalidValue);
    EXPECT("v2 end NULL", hipObjRcV2End(NULL).opError, hipObjInvalidValue);
    /* A pointer that is no session (here: the stack) is refused, not read. */
    EXPECT("v2 end foreign", hipObjRcV2End((hipObjRcV2Session_t *)probe).opError, hipObjInvalidValue);
    EXPECT("v2 start foreign", hipObjRcV2StartWrite((hipObjRcV2Session_t *)probe).opError, hipObjInvalidValue);
    EXPECT("v2 moved untouched", moved, 7);
    EXPECT("error string", hipObjGetErrorString(hipObjBusy) != NULL, 1);
    /* Unregistered (but valid) memory, where the call needs init. */
    EXPECT("sync unregistered", hipObjBufSync(probe, 64, 0, HIPOBJ_SYNC_TO_HOST).opError,
           inited ? hipObjBufNotRegistered : hipObjNotInitialized);
}

static hipObjConfig_t config(const char *nic) {
    hipObjConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gpuDevice = -1;
    cfg.nicHint = nic;
    return cfg;
}

int main(int argc, char **argv) {
    int cycles = argc > 1 ? atoi(argv[1]) : 3;
    const char *nic = getenv("HIPOBJ_TEST_NIC");
    if (nic == NULL || *nic == '\0') {
        fprintf(stderr, "misuse_test: set HIPOBJ_TEST_NIC (softroce0 for the soft NIC)\n");
        return 2;
    }
    hipObjConfig_t cfg = config(nic);

    nulls(0);
    EXPECT("shutdown before init", hipObjShutdown().opError, hipObjSuccess);
    EXPECT("init", hipObjInit(&cfg).opError, hipObjSuccess);
    nulls(1);

    /* Double deregistration. */
    size_t n = 8192;
    char *a = malloc(n);
    if (a == NULL) return 1;
    memset(a, 0x5a, n);
    EXPECT("register a", hipObjBufRegisterHost(a, n).opError, hipObjSuccess);
    EXPECT("register a twice", hipObjBufRegisterHost(a, n).opError, hipObjBufAlreadyRegistered);
    EXPECT("register inside a", hipObjBufRegisterHost(a + 1, 16).opError, hipObjBufAlreadyRegistered);
    EXPECT("deregister inside a", hipObjBufDeregister(a + 1).opError, hipObjBufNotRegistered);
    EXPECT("deregister a", hipObjBufDeregister(a).opError, hipObjSuccess);
    EXPECT("deregister a twice", hipObjBufDeregister(a).opError, hipObjBufNotRegistered);
    EXPECT("deregister a thrice", hipObjBufDeregister(a).opError, hipObjBufNotRegistered);

    /* Callbacks that misbehave, on a registered buffer: defined codes, and
     * the buffer's bytes untouched. */
    EXPECT("register a again", hipObjBufRegisterHost(a, n).opError, hipObjSuccess);
    hipObjOps_t failing_send = {send_fail, recv_200};
    hipObjOps_t failing_recv = {send_ok, recv_fail};
    hipObjOps_t overlong = {send_ok, recv_overlong};
    hipObjOps_t junk = {send_ok, recv_junk};
    hipObjOps_t unproven = {send_ok, recv_200};
    hipObjOps_t declined = {send_ok, recv_501};
    EXPECT("get, send fails", hipObjGet(NULL, a, n, 0, &failing_send, NULL).opError, hipObjS3Error);
    EXPECT("put, recv fails", hipObjPut(NULL, a, n, 0, &failing_recv, NULL).opError, hipObjS3Error);
    EXPECT("get, reply overlong", hipObjGet(NULL, a, n, 0, &overlong, NULL).opError, hipObjS3Error);
    EXPECT("get, reply junk", hipObjGet(NULL, a, n, 0, &junk, NULL).opError, hipObjS3Error);
    EXPECT("get, unproven 200", hipObjGet(NULL, a, n, 0, &unproven, NULL).opError, hipObjRdmaError);
    EXPECT("put, unproven 200", hipObjPut(NULL, a, n, 0, &unproven, NULL).opError, hipObjRdmaError);
    EXPECT("get, declined", hipObjGet(NULL, a, n, 0, &declined, NULL).opError, hipObjS3Error);
    EXPECT("get past the end", hipObjGet(NULL, a, n, 1, &unproven, NULL).opError, hipObjInvalidValue);
    int untouched = 1;
    for (size_t i = 0; i < n; i++) untouched &= a[i] == 0x5a;
    EXPECT("buffer untouched by failed calls", untouched, 1);
    EXPECT("deregister a at last", hipObjBufDeregister(a).opError, hipObjSuccess);
    free(a);

    /* A buffer freed while registered: deregistration must not touch it. */
    char *b = malloc(n);
    if (b == NULL) return 1;
    EXPECT("register b", hipObjBufRegisterHost(b, n).opError, hipObjSuccess);
    char *tok = NULL;
    EXPECT("token on b", hipObjGetRdmaToken(b, 64, HIPOBJ_RDMA_OP_GET, &tok).opError, hipObjSuccess);
    EXPECT("put token on b", hipObjPutRdmaToken(tok).opError, hipObjSuccess);
    /* The address only, as a number: the pointer itself dies with free(). */
    volatile uintptr_t b_addr = (uintptr_t)b;
    free(b);
    EXPECT("deregister freed b", hipObjBufDeregister((void *)b_addr).opError, hipObjSuccess);
    EXPECT("deregister freed b twice", hipObjBufDeregister((void *)b_addr).opError, hipObjBufNotRegistered);

    /* hipobj-rc-v2 sessions: NULL arguments on a live session, and one
     * freed twice. */
    char *v = malloc(n);
    if (v == NULL) return 1;
    EXPECT("register v", hipObjBufRegisterHost(v, n).opError, hipObjSuccess);
    hipObjRcV2Session_t *sv = NULL;
    char lines[HIPOBJ_RCV2_HEADERS_MAX];
    size_t lines_len = sizeof lines;
    EXPECT("v2 begin past the end", hipObjRcV2Begin(v, n, 1, HIPOBJ_RDMA_OP_PUT, &sv).opError, hipObjInvalidValue);
    EXPECT("v2 begin", hipObjRcV2Begin(v, n, 0, HIPOBJ_RDMA_OP_PUT, &sv).opError, hipObjSuccess);
    EXPECT("v2 prepare NULL bucket", hipObjRcV2PrepareHeaders(sv, NULL, "k", 0, lines, &lines_len).opError,
           hipObjInvalidValue);
    EXPECT("v2 prepare NULL key", hipObjRcV2PrepareHeaders(sv, "b", NULL, 0, lines, &lines_len).opError,
           hipObjInvalidValue);
    EXPECT("v2 prepare NULL out", hipObjRcV2PrepareHeaders(sv, "b", "k", 0, NULL, &lines_len).opError,
           hipObjInvalidValue);
    EXPECT("v2 prepare NULL len", hipObjRcV2PrepareHeaders(sv, "b", "k", 0, lines, NULL).opError, hipObjInvalidValue);
    EXPECT("v2 prepare PUT offset", hipObjRcV2PrepareHeaders(sv, "b", "k", 5, lines, &lines_len).opError,
           hipObjInvalidValue);
    EXPECT("v2 handle prepare NULL block", hipObjRcV2HandlePrepare(sv, 200, NULL, 10).opError, hipObjInvalidValue);
    EXPECT("v2 handle prepare bad status", hipObjRcV2HandlePrepare(sv, -200, "", 0).opError, hipObjInvalidValue);
    /* A 200 without any header: unusable, and the session is over. */
    EXPECT("v2 handle prepare empty 200", hipObjRcV2HandlePrepare(sv, 200, NULL, 0).opError, hipObjS3Error);
    EXPECT("v2 ready after failure", hipObjRcV2ReadyHeaders(sv, lines, &lines_len).opError, hipObjInvalidValue);
    EXPECT("v2 end", hipObjRcV2End(sv).opError, hipObjSuccess);
    EXPECT("v2 end twice", hipObjRcV2End(sv).opError, hipObjInvalidValue);
    EXPECT("v2 cancel after end", hipObjRcV2CancelHeaders(sv, lines, &lines_len).opError, hipObjInvalidValue);
    EXPECT("deregister v", hipObjBufDeregister(v).opError, hipObjSuccess);

    /* Calls after shutdown, with a buffer registered, a token held and an
     * hipobj-rc-v2 session open. */
    char *c = malloc(n);
    if (c == NULL) return 1;
    EXPECT("register c", hipObjBufRegisterHost(c, n).opError, hipObjSuccess);
    char *held = NULL;
    EXPECT("token on c", hipObjGetRdmaToken(c, 64, HIPOBJ_RDMA_OP_PUT, &held).opError, hipObjSuccess);
    EXPECT("v2 begin on c", hipObjRcV2Begin(c, 64, 0, HIPOBJ_RDMA_OP_GET, &sv).opError, hipObjSuccess);
    EXPECT("shutdown", hipObjShutdown().opError, hipObjSuccess);
    lines_len = sizeof lines;
    EXPECT("v2 prepare after shutdown", hipObjRcV2PrepareHeaders(sv, "b", "k", 0, lines, &lines_len).opError,
           hipObjNotInitialized);
    EXPECT("v2 start after shutdown", hipObjRcV2StartWrite(sv).opError, hipObjNotInitialized);
    EXPECT("v2 cancel after shutdown", hipObjRcV2CancelHeaders(sv, lines, &lines_len).opError, hipObjSuccess);
    EXPECT("v2 nothing owed", lines_len, 0);
    EXPECT("v2 end after shutdown", hipObjRcV2End(sv).opError, hipObjSuccess);
    free(v);
    EXPECT("shutdown twice", hipObjShutdown().opError, hipObjSuccess);
    int code = 0;
    hipObjOps_t ops = {send_ok, recv_200};
    EXPECT("register after shutdown", hipObjBufRegisterHost(c, n).opError, hipObjNotInitialized);
    EXPECT("deregister after shutdown", hipObjBufDeregister(c).opError, hipObjNotInitialized);
    EXPECT("get after shutdown", hipObjGet(NULL, c, n, 0, &ops, NULL).opError, hipObjNotInitialized);
    EXPECT("put after shutdown", hipObjPut(NULL, c, n, 0, &ops, NULL).opError, hipObjNotInitialized);
    EXPECT("sync after shutdown", hipObjBufSync(c, 16, 0, HIPOBJ_SYNC_TO_DEVICE).opError, hipObjNotInitialized);
    char *tok2 = NULL;
    EXPECT("token after shutdown", hipObjGetRdmaToken(c, 64, HIPOBJ_RDMA_OP_GET, &tok2).opError,
           hipObjNotInitialized);
    EXPECT("token after shutdown leaves out", tok2 == NULL, 1);
    EXPECT("handle reply after shutdown", hipObjHandleRdmaReply("200", 3, &code).opError, hipObjNotInitialized);
    char ip[16];
    EXPECT("held token still readable", hipObjTokenClientNic(held, ip, sizeof ip).opError, hipObjSuccess);
    EXPECT("put held token after shutdown", hipObjPutRdmaToken(held).opError, hipObjSuccess);
    EXPECT("put held token twice", hipObjPutRdmaToken(held).opError, hipObjInvalidValue);
    nulls(0);
    free(c);

    /* Init/shutdown cycles, each registering and leaving a buffer behind
     * for shutdown to drop. */
    for (int i = 0; i < cycles; i++) {
        EXPECT("cycle init", hipObjInit(&cfg).opError, hipObjSuccess);
        EXPECT("cycle init twice", hipObjInit(&cfg).opError, hipObjAlreadyInitialized);
        char *d = malloc(4096);
        if (d == NULL) return 1;
        EXPECT("cycle register", hipObjBufRegisterHost(d, 4096).opError, hipObjSuccess);
        char *t = NULL;
        EXPECT("cycle token", hipObjGetRdmaToken(d, 4096, HIPOBJ_RDMA_OP_GET, &t).opError, hipObjSuccess);
        EXPECT("cycle put token", hipObjPutRdmaToken(t).opError, hipObjSuccess);
        if (i % 2 == 0) EXPECT("cycle deregister", hipObjBufDeregister(d).opError, hipObjSuccess);
        EXPECT("cycle shutdown", hipObjShutdown().opError, hipObjSuccess);
        free(d);
    }

    if (failures != 0) {
        fprintf(stderr, "misuse_test: %d checks failed\n", failures);
        return 1;
    }
    printf("misuse_test: all checks passed (%d init/shutdown cycles)\n", cycles);
    return 0;
}
