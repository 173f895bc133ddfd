/* A program built only with `pkg-config --cflags --libs hipobj`, as an
 * application would be: it must find the header and the installed library. */
#include <hipobj.h>

#include <stdio.h>
#include <string.h>

int main(void) {
    unsigned major = 0, minor = 0, patch = 0;
    hipObjGetVersion(&major, &minor, &patch);
    if (major != HIPOBJ_VERSION_MAJOR || minor != HIPOBJ_VERSION_MINOR || patch != HIPOBJ_VERSION_PATCH) {
        fprintf(stderr, "version mismatch: library %u.%u.%u\n", major, minor, patch);
        return 1;
    }
    int code = 0;
    if (hipObjParseRdmaReply("206", 3, &code).opError != hipObjSuccess || code != 206) {
        fprintf(stderr, "hipObjParseRdmaReply failed\n");
        return 1;
    }
    printf("consumer: hipobj %s works\n", hipObjGetVersionString());
    return 0;
}
