/* get-object ENDPOINT BUCKET KEY SIZE OUTFILE: downloads an object of
 * exactly SIZE bytes with hipObjGet; the server RDMA WRITEs it into the
 * registered buffer, and the bytes are written to OUTFILE. hipObjGet
 * succeeds only when the server moved every byte asked for: an object
 * shorter than SIZE fails with hipObjS3Error (a HEAD request tells the size).
 * Credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY. NIC: HIPOBJ_NIC.
 * An https ENDPOINT is verified against AWS_CA_BUNDLE when set. */
#include "s3-request.h"

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s ENDPOINT BUCKET KEY SIZE OUTFILE\n", argv[0]);
        return 2;
    }
    size_t size = strtoull(argv[4], NULL, 10);
    if (size == 0) { fprintf(stderr, "SIZE must be at least 1\n"); return 2; }
    char *buf = calloc(1, size);
    if (buf == NULL) { perror("calloc"); return 1; }

    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (hipobj_start() != 0) return 1;
    hipObjError_t e = hipObjBufRegisterHost(buf, size);
    if (e.opError != hipObjSuccess) {
        fprintf(stderr, "hipObjBufRegisterHost: %s\n", hipObjGetErrorString(e.opError));
        return 1;
    }
    struct s3_request req;
    s3_setup(&req, "GET", argv[1], argv[2], argv[3]);
    hipObjOps_t ops = {s3_send, s3_recv};
    e = hipObjGet(NULL, buf, size, 0, &ops, &req);
    if (e.opError != hipObjSuccess) {
        fprintf(stderr, "hipObjGet: %s (HTTP %ld, reply %.*s)\n", hipObjGetErrorString(e.opError), req.status,
                (int)req.reply_len, req.reply);
        if (e.opError == hipObjS3Error && req.bytes < size)
            fprintf(stderr, "the server moved %llu of %zu bytes: is SIZE the object's size?\n", req.bytes, size);
        return 1;
    }
    if (req.bytes != size) { fprintf(stderr, "the server reports %llu bytes\n", req.bytes); return 1; }
    FILE *f = fopen(argv[5], "wb");
    if (f == NULL || fwrite(buf, 1, req.bytes, f) != req.bytes || fclose(f) != 0) { perror(argv[5]); return 1; }
    printf("GET %llu bytes over RDMA: HTTP %ld, reply %.*s\n", req.bytes, req.status, (int)req.reply_len, req.reply);
    hipObjBufDeregister(buf);
    hipObjShutdown();
    free(buf);
    curl_global_cleanup();
    return 0;
}
