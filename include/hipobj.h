/* hipobj.h: the C interface of hipObject.
 *
 * hipObject moves the bytes of S3 objects straight between an S3 server and
 * a buffer in GPU or host memory by RDMA. The application keeps its own S3
 * client: it puts a token from hipObject in the x-amz-rdma-token header of a
 * request, and hands the x-amz-rdma-reply header of the response back. The
 * server moves the payload with one-sided RDMA, a WRITE into the buffer for a
 * GET and a READ out of it for a PUT.
 *
 * SPDX-License-Identifier: MIT
 */

#pragma once

#include <stdint.h>
#include <stdlib.h>

#include <sys/types.h>

#if defined(__GNUC__)
#define HIPOBJ_API __attribute__((visibility("default")))
#else
#define HIPOBJ_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @file
 * @mainpage hipObject C API
 *
 * Groups: @ref core, @ref threads, @ref error, @ref buffer, @ref io,
 * @ref rcv2.
 */

/*!
 * @defgroup core Lifecycle and versions
 * @defgroup error Error codes
 * @defgroup buffer Registering buffers
 * @defgroup io Transfers
 */

/*!
 * @defgroup threads Threads
 *
 * Any function may be called on any thread, at any time, also from inside a
 * hipObjOps_t callback, and calls on different threads proceed together. A
 * call only waits for another for a moment, while that one updates shared
 * state such as the table of registered buffers. There are two exceptions:
 * a transfer may wait for a free RDMA connection, and hipObjInit() and
 * hipObjShutdown() never overlap each other. Because hipObjInit() reads
 * environment variables, no other thread may modify the environment
 * (setenv(), putenv(), unsetenv()) while it runs.
 *
 * Transfers: hipObjGet() and hipObjPut() run concurrently with each other
 * and with everything else. Each holds one RDMA connection for its duration,
 * taken from a pool that hipObjInit() fills. HIPOBJ_MAX_TRANSFERS sets the
 * size of that pool, and so how many transfers can be in flight: a whole
 * number from 1 to 1024; anything else is ignored and the pool holds 16. A
 * transfer that finds every connection taken waits until one comes back.
 *
 * Callbacks: a callback may call any hipObject function, hipObjGet() and
 * hipObjPut() included. A transfer started on a thread that already holds a
 * connection (as a callback's thread does) never waits for one, since it
 * could be waiting for its own: it returns hipObjBusy when none is free. A
 * callback that blocks on a transfer running on another thread can still
 * deadlock, and hipObject cannot notice. hipObject recognises a callback's
 * transfers by the thread they run on, so a callback must return on the
 * thread it was called on (mind fibers and coroutines that migrate).
 *
 * Buffers: while another call uses a buffer (a transfer, including the one
 * whose callback is asking, hipObjBufSync(), or hipObjGetRdmaToken()),
 * hipObjBufDeregister() on it returns hipObjBusy and the buffer stays
 * registered. Calls on different buffers do not wait for each other. As with
 * any C code, concurrent calls must not share memory that one of them
 * writes: overlapping ranges of a registered buffer, or a token one of them
 * releases. For a buffer staged through host memory (see hipObjBufSync()),
 * hipObjPut() and HIPOBJ_SYNC_TO_HOST write the staging copy, so they count
 * as writers of the range they use.
 *
 * Shutdown: hipObjShutdown() returns without waiting for calls in progress.
 * Those finish as usual, and the RDMA resources and registrations are
 * released when the last of them returns. A transfer still waiting for a
 * connection returns hipObjNotInitialized. From the moment hipObjShutdown()
 * is called, calls on any thread that need the library return
 * hipObjNotInitialized until hipObjInit() succeeds again, which it may do
 * before the earlier calls have finished.
 *
 * Transfers the application drives: a transfer made of
 * hipObjGetRdmaToken(), the application's own S3 request, and
 * hipObjBufSync() is several calls, and hipObject does not know it is in
 * progress between them. Nothing stops another thread from deregistering the
 * buffer or shutting hipObject down in between: the application has to keep
 * both alive until it is done. All tokens from hipObjGetRdmaToken() name the
 * same RDMA connection, so such transfers must not overlap one another; they
 * may overlap hipObjGet() and hipObjPut(), which use connections of their
 * own.
 */

/* -------------------------------------------------------------------------
 * Version
 * ------------------------------------------------------------------------- */

/* The package version in Cargo.toml is the single source of these numbers;
 * a test fails when these lines disagree with it. */

/*! @brief Major version of this header @ingroup core */
#define HIPOBJ_VERSION_MAJOR 0
/*! @brief Minor version of this header @ingroup core */
#define HIPOBJ_VERSION_MINOR 1
/*! @brief Patch version of this header @ingroup core */
#define HIPOBJ_VERSION_PATCH 0

/* -------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------- */

/*! @brief Base of hipObject's error number range @ingroup error */
#define HIPOBJ_BASE_ERR 6000

/*!
 * @brief What a call reports
 * @ingroup error
 */
typedef enum {
    hipObjSuccess = 0,          /*!< The call did what was asked. */
    hipObjInvalidValue,         /*!< An argument is NULL, out of range, or unacceptable. */
    hipObjNotInitialized,       /*!< hipObjInit() has not succeeded, or hipObjShutdown() ran. */
    hipObjAlreadyInitialized,   /*!< hipObjInit() already succeeded. */
    hipObjRdmaError,            /*!< libibverbs, the NIC, a connection or a transfer failed. */
    hipObjS3Error,              /*!< A callback failed, or the reply is not a success. */
    hipObjBufNotRegistered,     /*!< No buffer is registered at that address. */
    hipObjBufAlreadyRegistered, /*!< The range, or part of it, is already registered. */
    hipObjNicNotFound,          /*!< No RDMA NIC could be chosen or opened. */
    hipObjDmabufNotSupported,   /*!< The NIC cannot reach the GPU memory directly. */
    hipObjSizeTooLarge,         /*!< A size or count is over a limit. */
    hipObjInternalError,        /*!< hipObject failed inside, or a staging copy timed out. */
    /*!
     * Something the call needs is in use: a staging copy of the buffer that
     * timed out has not finished (see hipObjBufSync()), another call is using
     * the buffer given to hipObjBufDeregister(), or a transfer started from a
     * callback found no free RDMA connection (see @ref threads). Retry later.
     * cuObject has no such code; hipObject added it.
     */
    hipObjBusy,
} hipObjOpError_t;

/*!
 * @brief A result: hipObject's own code, plus the GPU runtime's error
 *        number when a runtime call caused it (0 otherwise)
 * @ingroup error
 */
typedef struct {
    hipObjOpError_t opError;
    int             hipError;
} hipObjError_t;

/*!
 * @brief A sentence describing an error code
 *
 * Works before hipObjInit(). An unknown value gets a sentence saying so. The
 * string is static: do not free it.
 * @ingroup error
 */
HIPOBJ_API const char *hipObjGetErrorString(hipObjOpError_t err);

/* -------------------------------------------------------------------------
 * Types
 * ------------------------------------------------------------------------- */

/*!
 * @brief The application's handle for an S3 object; hipObject passes it
 *        through and never looks at it
 * @ingroup core
 */
typedef void *hipObjHandle_t;

/*!
 * @brief How hipObject reaches the application's S3 client
 *
 * A transfer calls sendRequest() and then recvReply(), on its own thread,
 * with no hipObject lock held, so both may call any hipObject function (see
 * @ref threads). When the server first has to bind an RDMA connection, the
 * pair is called a second time for the same transfer, with the same token:
 * send the same request again. When that 409 comes from a server other than
 * the one the leased connection is bound to, hipObject may first switch to a
 * connection bound to that server and call the pair with a new token; send
 * the request with the token given. A transfer calls the pair at most three
 * times.
 *
 * @ingroup core
 */
typedef struct {
    /*!
     * Send the S3 request, with @p token as the value of its
     * x-amz-rdma-token header.
     *
     * @param ctx       The context given to hipObjGet() or hipObjPut()
     * @param token     The token: @p tokenLen hex digits, NUL-terminated
     * @param tokenLen  The token's length, without the NUL
     * @return 0 on success, a negative number on failure
     */
    int (*sendRequest)(void *ctx, const char *token, size_t tokenLen);

    /*!
     * Hand over the response's x-amz-rdma-reply header value.
     *
     * @param ctx       The context given to hipObjGet() or hipObjPut()
     * @param reply     Where to copy the value (no NUL needed)
     * @param replyLen  On entry the room at @p reply; set it to the length
     *                  written
     * @return 0 on success, a negative number on failure (for example when
     *         the response has no such header)
     */
    int (*recvReply)(void *ctx, char *reply, size_t *replyLen);
} hipObjOps_t;

/*!
 * @brief What hipObjInit() is asked for
 *
 * The S3 fields are not read: hipObject makes no S3 requests of its own.
 *
 * gpuDevice is the index of the GPU whose nearest RDMA NIC hipObject uses,
 * or -1 for the calling thread's current GPU. Without a GPU, pass -1 and
 * name the NIC in nicHint.
 *
 * nicHint is NULL, "", or a comma-separated list of RDMA device names (as
 * ibv_devices prints them, or a soft RoCE device name) that hipObject may
 * choose from. When the NIC cannot be chosen by the GPU's position (for
 * example on a host without a GPU), hipObject opens the device nicHint
 * names, which must then be exactly one.
 *
 * Zero every field you do not use.
 *
 * @ingroup core
 */
typedef struct {
    const char *endpoint;  /*!< Not read                       */
    const char *region;    /*!< Not read                       */
    const char *accessKey; /*!< Not read                       */
    const char *secretKey; /*!< Not read                       */
    uint32_t    flags;     /*!< Reserved: must be 0            */
    int         gpuDevice; /*!< GPU index, or -1               */
    const char *nicHint;   /*!< RDMA device names, or NULL     */
} hipObjConfig_t;

/*! @brief Token for a PUT: the server RDMA READs the buffer @ingroup io */
#define HIPOBJ_RDMA_OP_PUT 0
/*! @brief Token for a GET: the server RDMA WRITEs the buffer @ingroup io */
#define HIPOBJ_RDMA_OP_GET 1

/*! @brief The reply code of a server that declines RDMA; the application
 *         falls back to plain HTTP @ingroup io */
#define HIPOBJ_RDMA_REPLY_NOT_IMPLEMENTED 501

/* -------------------------------------------------------------------------
 * Lifecycle
 * ------------------------------------------------------------------------- */

/*!
 * @brief Start hipObject
 *
 * Finds the RDMA NIC nearest the GPU (see hipObjConfig_t), opens it, and
 * creates the pool of RDMA connections that transfers lease (see
 * @ref threads).
 *
 * Until it succeeds, every function returns hipObjNotInitialized except
 * hipObjGetErrorString(), hipObjGetVersionString(), hipObjGetVersion(),
 * hipObjParseRdmaReply(), hipObjTokenClientNic() and hipObjPutRdmaToken(),
 * which need no initialization, hipObjRcV2CancelHeaders() and
 * hipObjRcV2End(), which work on a session that outlived its instance, and
 * hipObjShutdown(), which then does nothing.
 *
 * Reads the HIPOBJ_* environment variables, once; see @ref threads about
 * changing the environment meanwhile.
 *
 * @return hipObjInvalidValue when config is NULL, flags is not 0, or
 *         gpuDevice is below -1 or past the last GPU;
 *         hipObjAlreadyInitialized when already started; hipObjNicNotFound
 *         when there is no NIC to use; hipObjRdmaError when libibverbs does
 *         not load, a GPU runtime call fails (hipError holds its error), or
 *         the NIC cannot be opened or the connections created.
 * @ingroup core
 */
HIPOBJ_API hipObjError_t hipObjInit(hipObjConfig_t *config);

/*!
 * @brief Stop hipObject
 *
 * Releases the RDMA resources and deregisters every buffer. Calls still
 * running on other threads, or the transfer whose callback calls this, are
 * not waited for: they finish, and what they use is released when the last
 * of them returns (see @ref threads).
 *
 * A staging buffer that a timed-out copy may still be using is never freed.
 *
 * @return hipObjSuccess, also when hipObject was not started.
 * @ingroup core
 */
HIPOBJ_API hipObjError_t hipObjShutdown(void);

/* -------------------------------------------------------------------------
 * Buffers
 * ------------------------------------------------------------------------- */

/*!
 * @brief Register GPU memory for transfers
 *
 * Registers the range with the NIC as a dma-buf where the NIC and the
 * driver support it, else as plain memory, else through a pinned host
 * staging buffer (a warning on stderr says so; HIPOBJ_REQUIRE_GPU_DIRECT
 * turns that fallback into hipObjDmabufNotSupported). The range must lie in
 * one GPU allocation, or the call returns hipObjInvalidValue. At most 4 GiB;
 * at most 256 buffers at once.
 *
 * @param devPtr  Memory from the GPU runtime's allocator
 * @param size    Bytes, from 1 to 4 GiB
 * @ingroup buffer
 */
HIPOBJ_API hipObjError_t hipObjBufRegister(void *devPtr, size_t size);

/*!
 * @brief Register host memory for transfers
 *
 * Any CPU memory the application owns (malloc(), pinned memory, ...); GPU
 * memory is refused with hipObjInvalidValue. hipObject neither allocates nor
 * frees it. At most 4 GiB.
 *
 * @param hostPtr  The first byte
 * @param size     Bytes, from 1 to 4 GiB
 * @ingroup buffer
 */
HIPOBJ_API hipObjError_t hipObjBufRegisterHost(void *hostPtr, size_t size);

/*!
 * @brief Deregister a buffer
 *
 * Returns hipObjBusy, and leaves the buffer registered, while another call
 * uses it (see @ref threads) or a timed-out staging copy of it is still
 * running (see hipObjBufSync()). Try again once that is over, and keep the
 * memory allocated until this succeeds.
 *
 * @param devPtr  The address given to hipObjBufRegister() or
 *                hipObjBufRegisterHost()
 * @ingroup buffer
 */
HIPOBJ_API hipObjError_t hipObjBufDeregister(void *devPtr);

/* -------------------------------------------------------------------------
 * Transfers
 * ------------------------------------------------------------------------- */

/*!
 * @brief GET: the server RDMA WRITEs object bytes into a registered buffer
 *
 * The bytes land at @p offset into the buffer, and offset + size must not
 * pass its end. Which bytes of the object are sent is the S3 request's
 * business (a Range header, for example); hipObject sends no object offset.
 *
 * No GPU work may read or write the range while this runs. On
 * hipObjSuccess the data is in the buffer: the server's reply named the
 * server queue pair bound to the connection and counted exactly @p size
 * bytes, and the server's RDMA WRITEs WITH IMMEDIATE reached the connection
 * and, by the byte counts the NIC reported, landed exactly @p size bytes
 * (docs/protocol.md section 2). A reply counting fewer bytes
 * (the object or range is shorter than @p size) returns hipObjS3Error; a
 * success without that proof (a bare "200", "ok", "204" or "206", another
 * queue pair, a count above @p size, WRITEs that land fewer bytes or leave
 * a gap, an access the NIC refused during the call) returns
 * hipObjRdmaError. Either way the connection is destroyed, so nothing the
 * server sends later lands in the buffer.
 *
 * When every RDMA connection is taken, this waits for one, or returns
 * hipObjBusy if called from a callback (see @ref threads).
 *
 * For a staged buffer (see hipObjBufSync()), a copy to the GPU that misses
 * the HIPOBJ_STAGE_TIMEOUT_MS deadline makes this return
 * hipObjInternalError while the copy goes on; it may still write the buffer
 * afterwards, and calls that start later get hipObjBusy for the buffer until
 * it ends.
 *
 * @param handle  The application's object handle, passed through
 * @param devPtr  The registered buffer's address
 * @param size    Bytes to transfer
 * @param offset  Where in the buffer they go
 * @param ops     The application's S3 callbacks
 * @param ctx     Passed to the callbacks
 * @ingroup io
 */
HIPOBJ_API hipObjError_t hipObjGet(hipObjHandle_t handle, void *devPtr, size_t size, off_t offset,
                                   hipObjOps_t *ops, void *ctx);

/*!
 * @brief PUT: the server RDMA READs object bytes out of a registered buffer
 *
 * The bytes are read from @p offset into the buffer, and offset + size
 * must not pass its end. Where they go in the object is the S3 request's
 * business; hipObject sends no object offset.
 *
 * hipObject does not wait for GPU work writing the buffer on any stream:
 * finish it (for example with hipStreamSynchronize()) before calling.
 *
 * On hipObjSuccess the server's reply named the server queue pair bound to
 * the connection and counted exactly @p size bytes read. A smaller count
 * returns hipObjS3Error; a success without the queue pair and count, or
 * naming another queue pair, returns hipObjRdmaError.
 *
 * When every RDMA connection is taken, this waits for one, or returns
 * hipObjBusy if called from a callback (see @ref threads).
 *
 * For a staged buffer (see hipObjBufSync()), a copy from the GPU that misses
 * the HIPOBJ_STAGE_TIMEOUT_MS deadline makes this return
 * hipObjInternalError while the copy goes on; it may still read the buffer
 * afterwards, and calls that start later get hipObjBusy for the buffer until
 * it ends.
 *
 * @param handle  The application's object handle, passed through
 * @param devPtr  The registered buffer's address
 * @param size    Bytes to transfer
 * @param offset  Where in the buffer they are read from
 * @param ops     The application's S3 callbacks
 * @param ctx     Passed to the callbacks
 * @ingroup io
 */
HIPOBJ_API hipObjError_t hipObjPut(hipObjHandle_t handle, const void *devPtr, size_t size, off_t offset,
                                   hipObjOps_t *ops, void *ctx);

/*! @brief hipObjBufSync(): copy GPU memory into the staging buffer @ingroup io */
#define HIPOBJ_SYNC_TO_HOST 0
/*! @brief hipObjBufSync(): copy the staging buffer into GPU memory @ingroup io */
#define HIPOBJ_SYNC_TO_DEVICE 1

/*!
 * @brief Copy a range of a staged buffer between GPU and host memory
 *
 * When the NIC cannot reach a GPU buffer (no dma-buf support, or no
 * peer-to-peer path), hipObjBufRegister() registers a pinned host staging
 * buffer in its place, and the server's RDMA reads and writes that. An
 * application driving a transfer with hipObjGetRdmaToken() therefore calls
 * this with HIPOBJ_SYNC_TO_HOST before a PUT and HIPOBJ_SYNC_TO_DEVICE after
 * a GET; hipObjGet() and hipObjPut() do it on their own. For a buffer the
 * NIC reaches directly it does nothing and succeeds.
 *
 * On hipObjSuccess the copy is complete. A copy that misses the
 * HIPOBJ_STAGE_TIMEOUT_MS deadline makes this return hipObjInternalError
 * and goes on running, reading or writing the buffer. hipObject then keeps
 * the staging buffer, and later hipObjGet(), hipObjPut(), hipObjBufSync()
 * and hipObjGetRdmaToken() calls on the buffer return hipObjBusy, as does
 * hipObjBufDeregister(), until the copy is seen to be done; calls already
 * running are not stopped. A copy that never ends keeps its staging buffer
 * forever.
 *
 * hipObject does not wait for GPU work on any stream: before
 * HIPOBJ_SYNC_TO_HOST, finish the work that writes the buffer; before
 * HIPOBJ_SYNC_TO_DEVICE, finish all work that uses it.
 *
 * @ingroup io
 */
HIPOBJ_API hipObjError_t hipObjBufSync(void *devPtr, size_t size, off_t offset, int direction);

/*!
 * @brief Make a token for the first @p size bytes of a registered buffer
 *
 * The token is 88 hex digits, NUL-terminated; release it with
 * hipObjPutRdmaToken(). @p op is HIPOBJ_RDMA_OP_PUT or HIPOBJ_RDMA_OP_GET
 * and picks what the token lets the server do: a PUT token carries a key
 * that allows only RDMA READ of the buffer, a GET token one that allows only
 * RDMA WRITE, over exactly those @p size bytes, until hipObjPutRdmaToken(),
 * a failed reply, the buffer's deregistration or the next
 * hipObjGetRdmaToken() (which revokes this token). The reply handler,
 * hipObjHandleRdmaReply, checks a success against the latest token (a GET's
 * WRITEs WITH IMMEDIATE must land exactly @p size bytes; the count must be
 * @p size).
 *
 * Returns hipObjBusy while a timed-out staging copy of the buffer still runs
 * (see hipObjBufSync()).
 *
 * @ingroup io
 */
HIPOBJ_API hipObjError_t hipObjGetRdmaToken(const void *devPtr, size_t size, int op, char **outToken);

/*!
 * @brief Release a token from hipObjGetRdmaToken()
 *
 * Ends what the token granted the server: its memory window over the buffer
 * is invalidated (or, on a NIC without memory windows, the token
 * connection's remote access is closed), so the server can no longer reach
 * the buffer through it. Works before hipObjInit() and after hipObjShutdown(). A pointer that is not
 * a live token from hipObjGetRdmaToken() (NULL included) is refused with
 * hipObjInvalidValue and left alone.
 * @ingroup io
 */
HIPOBJ_API hipObjError_t hipObjPutRdmaToken(char *token);

/*!
 * @brief Read an x-amz-rdma-reply value
 *
 * Writes the reply's HTTP-style code to @p httpCode: 200, 204 or 206 on
 * success, 501 when the server declined RDMA, 409 when it asks to bind a
 * connection, 200 for "ok" and 500 for "err". Trailing NUL, CR and LF bytes
 * are ignored; anything that does not follow the grammar of docs/protocol.md
 * returns hipObjInvalidValue. Works before hipObjInit().
 *
 * @ingroup io
 */
HIPOBJ_API hipObjError_t hipObjParseRdmaReply(const char *reply, size_t replyLen, int *httpCode);

/*!
 * @brief Act on the reply to a request that carried a token from
 *        hipObjGetRdmaToken()
 *
 * hipObject added this function; cuObject has none like it. Transfers that
 * the application drives need the same binding handshake as hipObjGet() and
 * hipObjPut() (docs/protocol.md): pass every x-amz-rdma-reply value that
 * answers a request carrying such a token here.
 *
 * - A binding reply (409 and the server's token and PSN): hipObject connects
 *   the token connection to the server, writes 409 to @p httpCode and
 *   returns hipObjSuccess. Send the same request, with the same token,
 *   again. One binding round is allowed per token (and again after each
 *   completed transfer): a second 409 in a row returns hipObjS3Error. A
 *   server token that names no usable queue pair (QP number outside
 *   2..2^24-1, GID :: or multicast, port 0) returns hipObjS3Error.
 * - A success reply: only the full form "NNN:<token>:<count>" (NNN 200, 204
 *   or 206) is accepted. hipObject checks that it names the server queue
 *   pair the connection is bound to, that the connection has not failed,
 *   and that the count is the length of the latest token from
 *   hipObjGetRdmaToken() (a GET's also by its RDMA WRITE WITH IMMEDIATE
 *   carrying that token's key), writes the code and returns hipObjSuccess. For a staged buffer,
 *   call hipObjBufSync() next as usual. A bare "200", "ok", "204" or "206"
 *   fails with hipObjRdmaError; a count below the token's length with
 *   hipObjS3Error.
 * - Any other reply returns hipObjS3Error (501: fall back to plain HTTP); a
 *   failed check returns hipObjRdmaError. Either way hipObject replaces the
 *   token connection, so nothing the server does later can reach the
 *   buffer, and later tokens name the new connection.
 *
 * A malformed reply returns hipObjInvalidValue and changes nothing.
 * hipObjParseRdmaReply() stays a pure parser; this is the call with effects.
 *
 * @param reply      The x-amz-rdma-reply value
 * @param replyLen   Its length in bytes
 * @param httpCode   Receives the reply's code on success
 * @ingroup io
 */
HIPOBJ_API hipObjError_t hipObjHandleRdmaReply(const char *reply, size_t replyLen, int *httpCode);

/*!
 * @brief Name the server that this process's requests go to
 *
 * hipObject added this function; cuObject has none like it. A reply that
 * asks the client to bind (409), or a hipobj-rc-v2 PREPARE answer, names
 * the server queue pair the client then connects to. A party on the HTTP
 * path could name one on its own NIC. After this call, such a reply may
 * only name an address of @p host (a host name, an IPv4 address or an
 * IPv6 address, resolved now), or one listed in the environment variable
 * HIPOBJ_ALLOW_PEER_GID (for servers behind NAT or whose RDMA NIC has
 * another address; "any" turns the check off). Any other is refused with
 * hipObjRdmaError before a queue pair is touched. It holds for
 * hipObjGet(), hipObjPut(), hipObjHandleRdmaReply() and the hipObjRcV2*
 * sessions begun afterwards, until the next call or hipObjShutdown(). NULL
 * turns the check off again (the default: docs/protocol.md section 8 says
 * what that leaves open).
 *
 * Returns hipObjInvalidValue when @p host is not UTF-8 or does not
 * resolve (nothing changes then).
 *
 * @param host  The endpoint's host, as in its URL, or NULL
 * @ingroup io
 */
HIPOBJ_API hipObjError_t hipObjSetServerAddress(const char *host);

/*!
 * @brief The client NIC's IPv4 address inside a token
 *
 * Writes the dotted-quad address, NUL-terminated, to @p nicIp when the
 * token's GID is IPv4-mapped (RoCE v2), and an empty string otherwise.
 * Returns hipObjInvalidValue for a malformed token or when @p nicIpLen
 * cannot hold the answer (16 bytes always can). Works before hipObjInit().
 *
 * @ingroup io
 */
HIPOBJ_API hipObjError_t hipObjTokenClientNic(const char *token, char *nicIp, size_t nicIpLen);

/*!
 * @brief The version of the running library, as "major.minor.patch"
 * @ingroup core
 */
HIPOBJ_API const char *hipObjGetVersionString(void);

/*!
 * @brief The version of the running library, as numbers
 *
 * This is the library actually loaded, which may differ from the
 * HIPOBJ_VERSION_* macros the application was built with. A NULL pointer
 * skips that number; the others are still written. Always returns
 * hipObjSuccess.
 *
 * @param major  Receives the major version, or NULL
 * @param minor  Receives the minor version, or NULL
 * @param patch  Receives the patch version, or NULL
 * @ingroup core
 */
HIPOBJ_API hipObjError_t hipObjGetVersion(unsigned *major, unsigned *minor, unsigned *patch);

/* -------------------------------------------------------------------------
 * hipobj-rc-v2 sessions (hipObject's addition; cuObject has none)
 * ------------------------------------------------------------------------- */

/*!
 * @defgroup rcv2 hipobj-rc-v2 sessions
 *
 * hipobj-rc-v2 is the handshake of S3 servers that do not take a token on
 * the object request (they answer it with 501 and
 * X-Amz-Rdma-Protocol-Status: unsupported): the application POSTs three
 * control requests, PREPARE, READY and CANCEL, to the paths below, each
 * with an empty body, signed with SigV4 like any other request of its S3
 * client, with every x-amz-rdma-* header among the signed ones. The bytes
 * move by RDMA WRITE WITH IMMEDIATE whose immediate value is the session's
 * cookie: the server writes into the buffer for a GET, the client writes
 * into the server's staging buffer for a PUT. docs/protocol.md has the
 * protocol, docs/c-api.md the call sequence.
 *
 * As with hipObjGetRdmaToken(), hipObject makes every header value the
 * requests carry and checks every value the answers carry; the application
 * only moves them over HTTP. A request's headers come as text, one
 * "name: value" line each, every line ended by "\n", NUL-terminated (ready
 * for curl_slist_append() line by line); an answer's headers go back as
 * the response's header block as received (status line and CRLFs
 * included), so a libcurl CURLOPT_HEADERFUNCTION only has to append.
 *
 * A session holds one RDMA connection of the pool from hipObjRcV2Begin()
 * until hipObjRcV2End(), and its own queue pair is never reused: when the
 * session ends, however it ends, the grant over the buffer ends and the
 * queue pair leaves RTS, so a server writing late reaches nothing. A
 * session is used by one call at a time (calls on one session from several
 * threads wait for each other); different sessions run concurrently.
 */

/*!
 * @brief An hipobj-rc-v2 session: opaque; made by hipObjRcV2Begin(),
 *        freed by hipObjRcV2End() @ingroup rcv2
 */
typedef struct hipObjRcV2Session hipObjRcV2Session_t;

/*! @brief Where PREPARE is POSTed @ingroup rcv2 */
#define HIPOBJ_RCV2_PREPARE_PATH "/.hipobj-rc/prepare"
/*! @brief Where READY is POSTed @ingroup rcv2 */
#define HIPOBJ_RCV2_READY_PATH "/.hipobj-rc/ready"
/*! @brief Where CANCEL is POSTed @ingroup rcv2 */
#define HIPOBJ_RCV2_CANCEL_PATH "/.hipobj-rc/cancel"

/*! @brief Room that holds any request's header lines, NUL included, for a
 *         bucket name and key S3 accepts (key up to 1024 bytes) @ingroup rcv2 */
#define HIPOBJ_RCV2_HEADERS_MAX 4096

/*! @brief The largest transfer one session moves, in bytes (2^31 - 1) @ingroup rcv2 */
#define HIPOBJ_RCV2_MAX_SIZE 2147483647

/*!
 * @brief Start an hipobj-rc-v2 session over a registered buffer
 *
 * hipObject added this function; cuObject has none like it. Leases an RDMA
 * connection (waiting for one as hipObjGet() does, or hipObjBusy from a
 * thread that already holds one: a callback, or a live session of its own),
 * and draws the session's random cookie and PSN. Nothing can reach the
 * buffer yet. Until the session is over (a failed step,
 * hipObjRcV2HandleReady(), hipObjRcV2CancelHeaders() or hipObjRcV2End()),
 * hipObjBufDeregister() on the buffer returns hipObjBusy. For a PUT of a staged buffer (see hipObjBufSync()) the range
 * is copied to the staging buffer here; for a GET it is copied back by
 * hipObjRcV2HandleReady().
 *
 * @param devPtr      The registered buffer's address
 * @param size        Bytes to move, 1 to HIPOBJ_RCV2_MAX_SIZE
 *                    (hipObjSizeTooLarge above)
 * @param offset      Where in the buffer they are; offset + size must not
 *                    pass its end
 * @param op          HIPOBJ_RDMA_OP_GET or HIPOBJ_RDMA_OP_PUT
 * @param outSession  Receives the session; end it with hipObjRcV2End()
 * @ingroup rcv2
 */
HIPOBJ_API hipObjError_t hipObjRcV2Begin(const void *devPtr, size_t size, off_t offset, int op,
                                         hipObjRcV2Session_t **outSession);

/*!
 * @brief The headers of the PREPARE request
 *
 * hipObject added this function; cuObject has none like it. Writes the
 * header lines (x-amz-rdma-protocol, -op, -target, -size, -offset when
 * @p objectOffset is not 0, -token, -psn, -cookie) for the object
 * @p bucket / @p key, whose bytes from @p objectOffset on are moved (a
 * ranged GET; a PUT takes 0). Only before hipObjRcV2HandlePrepare(); a
 * later call returns hipObjInvalidValue.
 *
 * @param session     The session
 * @param bucket      The bucket name, NUL-terminated
 * @param key         The object key, UTF-8, NUL-terminated (hipObject
 *                    percent-encodes it)
 * @param objectOffset Where in the object a GET starts; 0 for a PUT
 * @param headers     Where the lines go
 * @param headersLen  On entry the room at @p headers; on success the length
 *                    written, without the NUL. Room that cannot hold the
 *                    lines and the NUL returns hipObjInvalidValue and writes
 *                    nothing (HIPOBJ_RCV2_HEADERS_MAX always suffices).
 * @ingroup rcv2
 */
HIPOBJ_API hipObjError_t hipObjRcV2PrepareHeaders(hipObjRcV2Session_t *session, const char *bucket,
                                                  const char *key, uint64_t objectOffset, char *headers,
                                                  size_t *headersLen);

/*!
 * @brief Act on the answer to PREPARE
 *
 * hipObject added this function; cuObject has none like it. @p headers is
 * the response's header block as received; lines without a colon (the
 * status line, the blank end) and headers other than x-amz-rdma-* are
 * skipped, names match in any case, a repeated x-amz-rdma-* header makes
 * the answer unusable. On hipObjSuccess the session's queue pair is
 * connected to the server's and, for a GET, the server may now RDMA WRITE
 * exactly the transfer's range (and nothing else); send READY next.
 *
 * A status other than 200, an answer missing or garbling a header, or a
 * server token that names no usable queue pair (QP number outside
 * 2..2^24-1, GID :: or multicast, port 0), disagrees with X-Amz-Rdma-Qpn or
 * the staging buffer headers, or (PUT) offers a staging buffer smaller than
 * the size returns hipObjS3Error; the session is then over (only
 * hipObjRcV2CancelHeaders() and hipObjRcV2End() remain useful). Called out
 * of order: hipObjInvalidValue, and the session is unchanged.
 *
 * @param session     The session
 * @param httpStatus  The response's HTTP status
 * @param headers     The response's header block (need not be
 *                    NUL-terminated)
 * @param headersLen  Its length in bytes
 * @ingroup rcv2
 */
HIPOBJ_API hipObjError_t hipObjRcV2HandlePrepare(hipObjRcV2Session_t *session, int httpStatus,
                                                 const char *headers, size_t headersLen);

/*!
 * @brief The headers of the READY request
 *
 * hipObject added this function; cuObject has none like it. Writes the
 * header lines (x-amz-rdma-protocol, -session, -cookie, -mr-addr, -mr-rkey,
 * -qpn; for a PUT the buffer headers are 0) once hipObjRcV2HandlePrepare()
 * succeeded, and until the PUT's write started; otherwise
 * hipObjInvalidValue. @p headersLen as for hipObjRcV2PrepareHeaders().
 * @ingroup rcv2
 */
HIPOBJ_API hipObjError_t hipObjRcV2ReadyHeaders(hipObjRcV2Session_t *session, char *headers,
                                                size_t *headersLen);

/*!
 * @brief PUT: start the client's RDMA WRITE WITH IMMEDIATE
 *
 * hipObject added this function; cuObject has none like it. Posts one RDMA
 * WRITE WITH IMMEDIATE of the whole range into the server's staging buffer,
 * immediate = the cookie. Call it while READY is open: after the request
 * has gone out (the server accepts the write only once READY reached it;
 * the RC transport retries an early write for about half a second) and
 * before its answer is handled. Returns at once; hipObjRcV2HandleReady()
 * checks that the write completed. For a GET it does nothing and succeeds,
 * so one code path serves both. Out of order: hipObjInvalidValue. A failure
 * to post (hipObjRdmaError) ends the session; a CANCEL is owed.
 * @ingroup rcv2
 */
HIPOBJ_API hipObjError_t hipObjRcV2StartWrite(hipObjRcV2Session_t *session);

/*!
 * @brief Act on the answer to READY
 *
 * hipObject added this function; cuObject has none like it. @p headers as
 * for hipObjRcV2HandlePrepare(). Success needs status 200,
 * X-Amz-Rdma-Cookie equal to the session's cookie,
 * X-Amz-Rdma-Bytes-Transferred equal to the size, and the RDMA itself: for
 * a GET, the server's WRITE WITH IMMEDIATE completed on the session's queue
 * pair with the cookie as immediate and exactly size bytes (waited for up
 * to 2 seconds after the answer, which the server sends only once its write
 * completed); for a PUT, the client's write completed. Then the bytes moved
 * go to @p bytesMoved, and for a GET into a staged buffer the range has
 * been copied to the GPU. A status other than 200, an unusable answer, or
 * fewer bytes than asked returns hipObjS3Error; another cookie (echoed or as
 * immediate), a count above the size, or a success without the write
 * returns hipObjRdmaError. Whatever the outcome, the grant and the queue
 * pair end before this returns, and no CANCEL is owed (any answer to READY
 * ends the server's session). Out of order: hipObjInvalidValue.
 *
 * @param session     The session
 * @param httpStatus  The response's HTTP status
 * @param headers     The response's header block
 * @param headersLen  Its length in bytes
 * @param bytesMoved  Receives the bytes moved on success; may be NULL
 * @ingroup rcv2
 */
HIPOBJ_API hipObjError_t hipObjRcV2HandleReady(hipObjRcV2Session_t *session, int httpStatus,
                                               const char *headers, size_t headersLen, uint64_t *bytesMoved);

/*!
 * @brief The headers of the CANCEL the server is owed, if any
 *
 * hipObject added this function; cuObject has none like it. A CANCEL is
 * owed from the moment the server named a session in its PREPARE answer
 * (even an answer that failed the checks) until READY was answered. When
 * one is owed, writes its header lines (x-amz-rdma-protocol, -session);
 * otherwise writes an empty string and sets @p headersLen to 0: send
 * nothing. Either way the session is over from this call on (a live one is
 * given up: its grant and queue pair end now), so call it on every path
 * that abandons a session. Works after hipObjShutdown(). @p headersLen as
 * for hipObjRcV2PrepareHeaders().
 * @ingroup rcv2
 */
HIPOBJ_API hipObjError_t hipObjRcV2CancelHeaders(hipObjRcV2Session_t *session, char *headers,
                                                 size_t *headersLen);

/*!
 * @brief End a session and free it
 *
 * hipObject added this function; cuObject has none like it. Always frees
 * the session, whatever state it is in, also after hipObjShutdown() and
 * after a failed call: the grant over the buffer ends and the queue pair
 * leaves RTS (a write the server sends later reaches nothing), and the RDMA
 * connection goes back to the pool, which replaces it. The handle is
 * invalid afterwards (it may name a later session). A pointer that is not a
 * live session (NULL included) returns hipObjInvalidValue and is left
 * alone. End a session on the thread that began it: until then that thread
 * counts as holding a connection (see hipObjRcV2Begin()). This does not
 * send CANCEL: ask hipObjRcV2CancelHeaders() first.
 * @ingroup rcv2
 */
HIPOBJ_API hipObjError_t hipObjRcV2End(hipObjRcV2Session_t *session);

#ifdef __cplusplus
}
#endif
