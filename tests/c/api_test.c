/* Calls every function of hipobj.h through the shared library, argument
 * checks included, and exits non-zero on the first surprise. It runs with
 * whatever RDMA devices the machine has; with none, init must say
 * hipObjNicNotFound or hipObjRdmaError, and everything that needs init must
 * say hipObjNotInitialized. Set HIPOBJ_TEST_NIC to a device name to also run
 * the calls that need an initialized library. */
#include <hipobj.h>

#include <stdint.h>
#include <stdio.h>
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
    (void)token;
    (void)len;
    return 0;
}

static int recv_ok(void *ctx, char *reply, size_t *len) {
    (void)ctx;
    memcpy(reply, "200", 3);
    *len = 3;
    return 0;
}

/* A token with transport RC, GID ::ffff:127.1.2.3, all else zero. */
static const char *TOKEN_V4 =
    "010000000000000000000000000000ffff7f0102030000000000000000000000000000000000000000000000";

int main(void) {
    unsigned major = 99, minor = 99, patch = 99;
    EXPECT("GetVersion", hipObjGetVersion(&major, &minor, &patch).opError, hipObjSuccess);
    EXPECT("major", major, HIPOBJ_VERSION_MAJOR);
    EXPECT("minor", minor, HIPOBJ_VERSION_MINOR);
    EXPECT("patch", patch, HIPOBJ_VERSION_PATCH);
    EXPECT("GetVersion NULLs", hipObjGetVersion(NULL, &minor, NULL).opError, hipObjSuccess);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", HIPOBJ_VERSION_MAJOR, HIPOBJ_VERSION_MINOR,
             HIPOBJ_VERSION_PATCH);
    EXPECT("version string", strcmp(hipObjGetVersionString(), want), 0);

    for (int e = hipObjSuccess; e <= hipObjBusy; e++) {
        const char *s = hipObjGetErrorString((hipObjOpError_t)e);
        EXPECT("error string present", s != NULL && strlen(s) > 10, 1);
    }
    EXPECT("unknown error string", strstr(hipObjGetErrorString((hipObjOpError_t)4242), "nknown") != NULL, 1);
    EXPECT("negative error string", strstr(hipObjGetErrorString((hipObjOpError_t)-1), "nknown") != NULL, 1);

    int code = 0;
    EXPECT("parse 200", hipObjParseRdmaReply("200", 3, &code).opError, hipObjSuccess);
    EXPECT("code 200", code, 200);
    EXPECT("parse 206 CRLF", hipObjParseRdmaReply("206\r\n", 5, &code).opError, hipObjSuccess);
    EXPECT("code 206", code, 206);
    EXPECT("parse ok", hipObjParseRdmaReply("ok", 2, &code).opError, hipObjSuccess);
    EXPECT("code ok", code, 200);
    EXPECT("parse 501", hipObjParseRdmaReply("501", 4, &code).opError, hipObjSuccess);
    EXPECT("code 501", code, HIPOBJ_RDMA_REPLY_NOT_IMPLEMENTED);
    code = 7;
    EXPECT("parse junk", hipObjParseRdmaReply("20x", 3, &code).opError, hipObjInvalidValue);
    EXPECT("junk leaves code", code, 7);
    EXPECT("parse 600", hipObjParseRdmaReply("600", 3, &code).opError, hipObjInvalidValue);
    EXPECT("parse empty", hipObjParseRdmaReply("", 0, &code).opError, hipObjInvalidValue);
    EXPECT("parse NULL reply", hipObjParseRdmaReply(NULL, 3, &code).opError, hipObjInvalidValue);
    EXPECT("parse NULL code", hipObjParseRdmaReply("200", 3, NULL).opError, hipObjInvalidValue);

    char ip[16];
    EXPECT("client nic", hipObjTokenClientNic(TOKEN_V4, ip, sizeof ip).opError, hipObjSuccess);
    EXPECT("client nic value", strcmp(ip, "127.1.2.3"), 0);
    EXPECT("client nic small", hipObjTokenClientNic(TOKEN_V4, ip, 5).opError, hipObjInvalidValue);
    EXPECT("client nic bad token", hipObjTokenClientNic("abc", ip, sizeof ip).opError, hipObjInvalidValue);
    EXPECT("client nic NULL", hipObjTokenClientNic(NULL, ip, sizeof ip).opError, hipObjInvalidValue);
    EXPECT("client nic NULL out", hipObjTokenClientNic(TOKEN_V4, NULL, 16).opError, hipObjInvalidValue);

    char not_a_token[89] = "x";
    EXPECT("put foreign token", hipObjPutRdmaToken(not_a_token).opError, hipObjInvalidValue);
    EXPECT("put NULL token", hipObjPutRdmaToken(NULL).opError, hipObjInvalidValue);

    /* Before init. */
    static char buf[4096];
    hipObjOps_t ops = {send_ok, recv_ok};
    char *token = NULL;
    EXPECT("shutdown uninit", hipObjShutdown().opError, hipObjSuccess);
    EXPECT("register uninit", hipObjBufRegisterHost(buf, sizeof buf).opError, hipObjNotInitialized);
    EXPECT("register dev uninit", hipObjBufRegister(buf, sizeof buf).opError, hipObjNotInitialized);
    EXPECT("deregister uninit", hipObjBufDeregister(buf).opError, hipObjNotInitialized);
    EXPECT("get uninit", hipObjGet(NULL, buf, 16, 0, &ops, NULL).opError, hipObjNotInitialized);
    EXPECT("put uninit", hipObjPut(NULL, buf, 16, 0, &ops, NULL).opError, hipObjNotInitialized);
    EXPECT("sync uninit", hipObjBufSync(buf, 16, 0, HIPOBJ_SYNC_TO_HOST).opError, hipObjNotInitialized);
    EXPECT("token uninit", hipObjGetRdmaToken(buf, 16, HIPOBJ_RDMA_OP_GET, &token).opError,
           hipObjNotInitialized);
    EXPECT("handle reply uninit", hipObjHandleRdmaReply("200", 3, &code).opError, hipObjNotInitialized);
    EXPECT("handle reply NULL", hipObjHandleRdmaReply(NULL, 3, &code).opError, hipObjInvalidValue);
    EXPECT("handle reply NULL code", hipObjHandleRdmaReply("200", 3, NULL).opError, hipObjInvalidValue);
    EXPECT("server address uninit", hipObjSetServerAddress("127.0.0.1").opError, hipObjNotInitialized);
    EXPECT("server address not UTF-8", hipObjSetServerAddress("\xff").opError, hipObjInvalidValue);

    /* Argument checks come before the initialization check. */
    EXPECT("register NULL", hipObjBufRegisterHost(NULL, 16).opError, hipObjInvalidValue);
    EXPECT("register 0", hipObjBufRegisterHost(buf, 0).opError, hipObjInvalidValue);
    EXPECT("register huge", hipObjBufRegisterHost(buf, (size_t)5 << 30).opError, hipObjSizeTooLarge);
    EXPECT("deregister NULL", hipObjBufDeregister(NULL).opError, hipObjInvalidValue);
    EXPECT("get NULL ops", hipObjGet(NULL, buf, 16, 0, NULL, NULL).opError, hipObjInvalidValue);
    hipObjOps_t half = {send_ok, NULL};
    EXPECT("get half ops", hipObjGet(NULL, buf, 16, 0, &half, NULL).opError, hipObjInvalidValue);
    EXPECT("get NULL buf", hipObjGet(NULL, NULL, 16, 0, &ops, NULL).opError, hipObjInvalidValue);
    EXPECT("get negative offset", hipObjGet(NULL, buf, 16, -1, &ops, NULL).opError, hipObjInvalidValue);
    EXPECT("put huge", hipObjPut(NULL, buf, (size_t)5 << 30, 0, &ops, NULL).opError, hipObjSizeTooLarge);
    EXPECT("sync bad direction", hipObjBufSync(buf, 16, 0, 2).opError, hipObjInvalidValue);
    EXPECT("token bad op", hipObjGetRdmaToken(buf, 16, 7, &token).opError, hipObjInvalidValue);
    EXPECT("token NULL out", hipObjGetRdmaToken(buf, 16, HIPOBJ_RDMA_OP_PUT, NULL).opError, hipObjInvalidValue);

    /* hipobj-rc-v2 sessions before init: arguments first, then the state. */
    hipObjRcV2Session_t *session = NULL;
    char lines[HIPOBJ_RCV2_HEADERS_MAX];
    size_t lines_len = sizeof lines;
    uint64_t moved = 0;
    EXPECT("v2 begin bad op", hipObjRcV2Begin(buf, 16, 0, 9, &session).opError, hipObjInvalidValue);
    EXPECT("v2 begin size 0", hipObjRcV2Begin(buf, 0, 0, HIPOBJ_RDMA_OP_GET, &session).opError, hipObjInvalidValue);
    EXPECT("v2 begin huge", hipObjRcV2Begin(buf, (size_t)HIPOBJ_RCV2_MAX_SIZE + 1, 0, HIPOBJ_RDMA_OP_GET, &session).opError,
           hipObjSizeTooLarge);
    EXPECT("v2 begin uninit", hipObjRcV2Begin(buf, 16, 0, HIPOBJ_RDMA_OP_GET, &session).opError, hipObjNotInitialized);
    EXPECT("v2 begin leaves out", session == NULL, 1);
    EXPECT("v2 end NULL", hipObjRcV2End(NULL).opError, hipObjInvalidValue);
    EXPECT("v2 start NULL", hipObjRcV2StartWrite(NULL).opError, hipObjInvalidValue);
    EXPECT("v2 cancel NULL", hipObjRcV2CancelHeaders(NULL, lines, &lines_len).opError, hipObjInvalidValue);
    EXPECT("v2 ready NULL", hipObjRcV2ReadyHeaders(NULL, lines, &lines_len).opError, hipObjInvalidValue);
    EXPECT("v2 prepare NULL", hipObjRcV2PrepareHeaders(NULL, "b", "k", 0, lines, &lines_len).opError,
           hipObjInvalidValue);
    EXPECT("v2 handle prepare NULL", hipObjRcV2HandlePrepare(NULL, 200, "", 0).opError, hipObjInvalidValue);
    EXPECT("v2 handle ready NULL", hipObjRcV2HandleReady(NULL, 200, "", 0, &moved).opError, hipObjInvalidValue);
    EXPECT("v2 paths", strcmp(HIPOBJ_RCV2_PREPARE_PATH, "/.hipobj-rc/prepare") == 0 &&
                       strcmp(HIPOBJ_RCV2_READY_PATH, "/.hipobj-rc/ready") == 0 &&
                       strcmp(HIPOBJ_RCV2_CANCEL_PATH, "/.hipobj-rc/cancel") == 0,
           1);

    EXPECT("init NULL", hipObjInit(NULL).opError, hipObjInvalidValue);
    hipObjConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gpuDevice = -1;
    cfg.flags = 1;
    EXPECT("init flags", hipObjInit(&cfg).opError, hipObjInvalidValue);
    cfg.flags = 0;
    cfg.gpuDevice = -2;
    EXPECT("init gpu -2", hipObjInit(&cfg).opError, hipObjInvalidValue);
    cfg.gpuDevice = -1;
    EXPECT("init no NIC", hipObjInit(&cfg).opError, hipObjNicNotFound);

    const char *nic = getenv("HIPOBJ_TEST_NIC");
    if (nic != NULL && *nic != '\0') {
        cfg.nicHint = nic;
        EXPECT("init", hipObjInit(&cfg).opError, hipObjSuccess);
        EXPECT("init twice", hipObjInit(&cfg).opError, hipObjAlreadyInitialized);
        EXPECT("register", hipObjBufRegisterHost(buf, sizeof buf).opError, hipObjSuccess);
        EXPECT("register again", hipObjBufRegisterHost(buf, sizeof buf).opError, hipObjBufAlreadyRegistered);
        EXPECT("register overlap", hipObjBufRegisterHost(buf + 100, 16).opError, hipObjBufAlreadyRegistered);
        /* Host memory no registration covers, through the GPU entry point. */
        static char host_only[64];
        EXPECT("register host as device", hipObjBufRegister(host_only, sizeof host_only).opError,
               hipObjInvalidValue);
        EXPECT("token", hipObjGetRdmaToken(buf, 64, HIPOBJ_RDMA_OP_GET, &token).opError, hipObjSuccess);
        EXPECT("token length", token != NULL && strlen(token) == 88, 1);
        EXPECT("token nic", hipObjTokenClientNic(token, ip, sizeof ip).opError, hipObjSuccess);
        EXPECT("handle malformed", hipObjHandleRdmaReply("2000", 4, &code).opError, hipObjInvalidValue);
        EXPECT("handle unbound success", hipObjHandleRdmaReply("200", 3, &code).opError, hipObjRdmaError);
        EXPECT("handle decline", hipObjHandleRdmaReply("501", 3, &code).opError, hipObjS3Error);
        EXPECT("server address", hipObjSetServerAddress("127.0.0.1").opError, hipObjSuccess);
        EXPECT("server address v6", hipObjSetServerAddress("[::1]").opError, hipObjSuccess);
        EXPECT("server address off", hipObjSetServerAddress(NULL).opError, hipObjSuccess);
        EXPECT("put token", hipObjPutRdmaToken(token).opError, hipObjSuccess);
        EXPECT("put token twice", hipObjPutRdmaToken(token).opError, hipObjInvalidValue);
        EXPECT("token too long", hipObjGetRdmaToken(buf, sizeof buf + 1, 1, &token).opError, hipObjInvalidValue);
        EXPECT("token unregistered", hipObjGetRdmaToken(buf + 1, 16, 1, &token).opError,
               hipObjBufNotRegistered);
        /* An hipobj-rc-v2 session that the server refuses. */
        EXPECT("v2 begin", hipObjRcV2Begin(buf, 64, 8, HIPOBJ_RDMA_OP_GET, &session).opError, hipObjSuccess);
        lines_len = sizeof lines;
        EXPECT("v2 prepare headers", hipObjRcV2PrepareHeaders(session, "bkt", "a key", 0, lines, &lines_len).opError,
               hipObjSuccess);
        EXPECT("v2 prepare length", lines_len == strlen(lines), 1);
        EXPECT("v2 prepare protocol", strncmp(lines, "x-amz-rdma-protocol: hipobj-rc-v2\n", 34) == 0, 1);
        EXPECT("v2 prepare op", strstr(lines, "\nx-amz-rdma-op: GET\n") != NULL, 1);
        EXPECT("v2 prepare target", strstr(lines, "\nx-amz-rdma-target: /bkt/a%20key\n") != NULL, 1);
        EXPECT("v2 prepare size", strstr(lines, "\nx-amz-rdma-size: 64\n") != NULL, 1);
        size_t small = 10;
        EXPECT("v2 prepare small", hipObjRcV2PrepareHeaders(session, "bkt", "k", 0, lines, &small).opError,
               hipObjInvalidValue);
        EXPECT("v2 prepare small length", small, 10);
        lines_len = sizeof lines;
        EXPECT("v2 ready early", hipObjRcV2ReadyHeaders(session, lines, &lines_len).opError, hipObjInvalidValue);
        EXPECT("v2 start early", hipObjRcV2StartWrite(session).opError, hipObjInvalidValue);
        EXPECT("v2 handle ready early", hipObjRcV2HandleReady(session, 200, "", 0, &moved).opError,
               hipObjInvalidValue);
        static const char refused[] = "HTTP/1.1 404 Not Found\r\nX-Amz-Rdma-Protocol: hipobj-rc-v2\r\n\r\n";
        EXPECT("v2 handle prepare 404", hipObjRcV2HandlePrepare(session, 404, refused, strlen(refused)).opError,
               hipObjS3Error);
        EXPECT("v2 handle prepare again", hipObjRcV2HandlePrepare(session, 404, refused, strlen(refused)).opError,
               hipObjInvalidValue);
        lines_len = sizeof lines;
        EXPECT("v2 cancel", hipObjRcV2CancelHeaders(session, lines, &lines_len).opError, hipObjSuccess);
        EXPECT("v2 nothing to cancel", lines_len == 0 && lines[0] == '\0', 1);
        EXPECT("v2 end", hipObjRcV2End(session).opError, hipObjSuccess);
        EXPECT("v2 end twice", hipObjRcV2End(session).opError, hipObjInvalidValue);
        EXPECT("sync host buffer", hipObjBufSync(buf, 16, 8, HIPOBJ_SYNC_TO_DEVICE).opError, hipObjSuccess);
        EXPECT("sync past end", hipObjBufSync(buf, 16, sizeof buf - 8, HIPOBJ_SYNC_TO_HOST).opError,
               hipObjInvalidValue);
        EXPECT("get past end", hipObjGet(NULL, buf, sizeof buf, 1, &ops, NULL).opError, hipObjInvalidValue);
        EXPECT("get unregistered", hipObjGet(NULL, buf + 8, 8, 0, &ops, NULL).opError, hipObjBufNotRegistered);
        EXPECT("deregister unknown", hipObjBufDeregister(buf + 8).opError, hipObjBufNotRegistered);
        EXPECT("deregister", hipObjBufDeregister(buf).opError, hipObjSuccess);
        EXPECT("deregister twice", hipObjBufDeregister(buf).opError, hipObjBufNotRegistered);
        EXPECT("shutdown", hipObjShutdown().opError, hipObjSuccess);
        EXPECT("register after shutdown", hipObjBufRegisterHost(buf, 16).opError, hipObjNotInitialized);
        EXPECT("init again", hipObjInit(&cfg).opError, hipObjSuccess);
        EXPECT("shutdown again", hipObjShutdown().opError, hipObjSuccess);
    }

    if (failures != 0) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("api_test: all checks passed\n");
    return 0;
}
