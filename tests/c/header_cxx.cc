// The header must compile on its own as C++, with C linkage for the API.
#include <hipobj.h>

int hipobj_header_cxx_probe();
int hipobj_header_cxx_probe() {
    hipObjError_t e = hipObjError_t();
    hipObjConfig_t c = hipObjConfig_t();
    c.gpuDevice = -1;
    hipObjError_t (*init)(hipObjConfig_t *) = &hipObjInit;
    (void)init;
    return static_cast<int>(e.opError) + c.gpuDevice + HIPOBJ_VERSION_MAJOR;
}
