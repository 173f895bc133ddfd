/* The header must compile on its own as strict C99. */
#include <hipobj.h>

int hipobj_header_c99_probe(void);
int hipobj_header_c99_probe(void) {
    hipObjError_t e = {hipObjSuccess, 0};
    hipObjConfig_t c = {0, 0, 0, 0, 0, -1, 0};
    hipObjOps_t o = {0, 0};
    (void)c;
    (void)o;
    return (int)e.opError + HIPOBJ_RDMA_OP_GET + HIPOBJ_SYNC_TO_DEVICE + HIPOBJ_BASE_ERR;
}
