/* put-object ENDPOINT BUCKET KEY FILE: uploads FILE with hipObjPut; the
 * server RDMA READs the bytes from the registered buffer.
 * Credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY. NIC: HIPOBJ_NIC.
 * An https ENDPOINT is verified against AWS_CA_BUNDLE when set. */
#include "s3-request.h"

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s ENDPOINT BUCKET KEY FILE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[4], "rb");
    if (f == NULL) { perror(argv[4]); return 1; }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    if (size <= 0) { fprintf(stderr, "%s is empty: send it over plain HTTP\n", argv[4]); return 1; }
    char *buf = malloc((size_t)size);
    if (buf == NULL || fread(buf, 1, (size_t)size, f) != (size_t)size) { perror("read"); return 1; }
    fclose(f);

    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (hipobj_start() != 0) return 1;
    hipObjError_t e = hipObjBufRegisterHost(buf, (size_t)size);
    if (e.opError != hipObjSuccess) {
        fprintf(stderr, "hipObjBufRegisterHost: %s\n", hipObjGetErrorString(e.opError));
        return 1;
    }
    /* Only to a server seen to speak the binding exchange: a plain one
     * would store the empty body of the token request. */
    enum s3_speaks speaks = s3_probe(argv[1], argv[2], argv[3]);
    if (speaks != S3_BINDING) {
        fprintf(stderr, "not sending a PutObject with a token: %s\n",
                speaks == S3_PROBE_FAILED ? "the probe failed"
                : speaks == S3_RC_V2      ? "the server speaks hipobj-rc-v2 only (see rc-v2-object.c)"
                                          : "the server does not speak the RDMA protocol; send the file over plain HTTP");
        return 1;
    }
    struct s3_request req;
    s3_setup(&req, "PUT", argv[1], argv[2], argv[3]);
    hipObjOps_t ops = {s3_send, s3_recv};
    e = hipObjPut(NULL, buf, (size_t)size, 0, &ops, &req);
    if (e.opError != hipObjSuccess) {
        fprintf(stderr, "hipObjPut: %s (HTTP %ld, reply %.*s)\n", hipObjGetErrorString(e.opError), req.status,
                (int)req.reply_len, req.reply);
        return 1;
    }
    printf("PUT %ld bytes over RDMA: HTTP %ld, reply %.*s\n", size, req.status, (int)req.reply_len, req.reply);
    hipObjBufDeregister(buf);
    hipObjShutdown();
    free(buf);
    curl_global_cleanup();
    return 0;
}
