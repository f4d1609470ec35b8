/* CuPy's runtime module (cupy_backends.cuda.api.runtime), routed to the null CUDA.
 *
 * That module links NVIDIA's CUDA runtime statically: its cuda* calls are internal to it and
 * no loader trick reaches them, and the static runtime refuses a driver it cannot verify
 * (nullcuda.c refuses it in turn, so an unrouted call raises CuPy's own CUDARuntimeError).
 * CuPy's other Cython modules call the runtime module's functions through the C pointers it
 * exports in __pyx_capi__, and Python code through its attributes. This module provides,
 * for the functions the host paths use, a function with the same C signature (Cython's
 * calling convention: the trailing skip_dispatch flag, an optional-arguments struct where
 * there are defaults, "except" values) that calls the null CUDA's cuda* function, and
 * raises CuPy's CUDARuntimeError through the module's own check_status where it fails.
 * tests/nullcuda/__init__.py swaps them in, capsule and attribute, before any module that
 * cimports the runtime module is imported, and only where the signatures match.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* nullcuda.c (preloaded: resolved from the process) */
extern int cudaDriverGetVersion(int *);
extern int cudaRuntimeGetVersion(int *);
extern int cudaGetDeviceCount(int *);
extern int cudaGetDevice(int *);
extern int cudaSetDevice(int);
extern int cudaDeviceGetAttribute(int *, int, int);
extern int cudaDeviceSynchronize(void);
extern int cudaDeviceCanAccessPeer(int *, int, int);
extern int cudaDeviceEnablePeerAccess(int, unsigned);
extern int cudaDeviceGetLimit(size_t *, int);
extern int cudaDeviceSetLimit(int, size_t);
extern int cudaMalloc(void **, size_t);
extern int cudaMallocManaged(void **, size_t, unsigned);
extern int cudaMallocAsync(void **, size_t, void *);
extern int cudaHostAlloc(void **, size_t, unsigned);
extern int cudaHostRegister(void *, size_t, unsigned);
extern int cudaHostUnregister(void *);
extern int cudaFree(void *);
extern int cudaFreeHost(void *);
extern int cudaFreeAsync(void *, void *);
extern int cudaMemGetInfo(size_t *, size_t *);
extern int cudaMemcpy(void *, const void *, size_t, int);
extern int cudaMemcpyAsync(void *, const void *, size_t, int, void *);
extern int cudaMemcpyPeer(void *, int, const void *, int, size_t);
extern int cudaMemcpyPeerAsync(void *, int, const void *, int, size_t, void *);
extern int cudaMemcpy2D(void *, size_t, const void *, size_t, size_t, size_t, int);
extern int cudaMemcpy2DAsync(void *, size_t, const void *, size_t, size_t, size_t, int, void *);
extern int cudaMemset(void *, int, size_t);
extern int cudaMemsetAsync(void *, int, size_t, void *);
extern int cudaMemPrefetchAsync(const void *, size_t, int, void *);
extern int cudaMemAdvise(const void *, size_t, int, int);
extern int nullcuda_pointer(const void *, int *, int *);
extern int cudaStreamCreate(void **);
extern int cudaStreamCreateWithFlags(void **, unsigned);
extern int cudaStreamCreateWithPriority(void **, unsigned, int);
extern int cudaStreamGetFlags(void *, unsigned *);
extern int cudaStreamGetPriority(void *, int *);
extern int cudaStreamDestroy(void *);
extern int cudaStreamSynchronize(void *);
extern int cudaStreamQuery(void *);
extern int cudaStreamWaitEvent(void *, void *, unsigned);
extern int cudaStreamIsCapturing(void *, int *);
extern int cudaEventCreate(void **);
extern int cudaEventCreateWithFlags(void **, unsigned);
extern int cudaEventDestroy(void *);
extern int cudaEventRecord(void *, void *);
extern int cudaEventSynchronize(void *);
extern int cudaEventQuery(void *);
extern int cudaEventElapsedTime(float *, void *, void *);

#define P(x) ((void *)(x))
#define NOT_SUPPORTED 801 /* cudaErrorNotSupported */

/* CuPy's runtime.check_status (raises CUDARuntimeError) and runtime.PointerAttributes. Global,
 * not module state: the routed functions are called through the runtime module's capsules,
 * with Cython's arguments only, and there is one runtime module per process. */
static PyObject *(*check_status)(int, int);
static PyObject *pointer_attributes;

/* Raise CuPy's error for status; the caller returns its "except" value. */
static void raise_status(int status) {
    PyObject *result = check_status ? check_status(status, 0) : NULL;
    Py_XDECREF(result);
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_RuntimeError, "null CUDA: CUDA runtime status %d", status);
}

/* Optional-arguments structs of Cython's cpdef functions with defaults. */
struct opt_unsigned {
    int n;
    unsigned value;
};
struct opt_int {
    int n;
    int value;
};

/* int f(...) except? -1 */
#define RETURN_INT(call, value)                                                                          \
    do {                                                                                                 \
        int status_ = (call);                                                                            \
        if (status_) {                                                                                   \
            raise_status(status_);                                                                       \
            return -1;                                                                                   \
        }                                                                                                \
        return (value);                                                                                  \
    } while (0)
/* intptr_t f(...) except? 0 */
#define RETURN_PTR(call, value)                                                                          \
    do {                                                                                                 \
        int status_ = (call);                                                                            \
        if (status_) {                                                                                   \
            raise_status(status_);                                                                       \
            return 0;                                                                                    \
        }                                                                                                \
        return (intptr_t)(value);                                                                        \
    } while (0)
/* object f(...): None, or NULL with CuPy's error */
#define RETURN_NONE(call)                                                                                \
    do {                                                                                                 \
        int status_ = (call);                                                                            \
        if (status_) {                                                                                   \
            raise_status(status_);                                                                       \
            return NULL;                                                                                 \
        }                                                                                                \
        Py_RETURN_NONE;                                                                                  \
    } while (0)

static int driverGetVersion(int skip) {
    int v;
    (void)skip;
    RETURN_INT(cudaDriverGetVersion(&v), v);
}
static int runtimeGetVersion(int skip) {
    int v;
    (void)skip;
    RETURN_INT(cudaRuntimeGetVersion(&v), v);
}
static int getCUDAMajorVersion(int skip) {
    int v;
    (void)skip;
    RETURN_INT(cudaRuntimeGetVersion(&v), v / 1000);
}
static int getDevice(int skip) {
    int d;
    (void)skip;
    RETURN_INT(cudaGetDevice(&d), d);
}
static int deviceGetAttribute(int attr, int device, int skip) {
    int v;
    (void)skip;
    RETURN_INT(cudaDeviceGetAttribute(&v, attr, device), v);
}
static int getDeviceCount(int skip) {
    int n;
    (void)skip;
    RETURN_INT(cudaGetDeviceCount(&n), n);
}
static PyObject *setDevice(int device, int skip) {
    (void)skip;
    RETURN_NONE(cudaSetDevice(device));
}
static PyObject *deviceSynchronize(int skip) {
    (void)skip;
    RETURN_NONE(cudaDeviceSynchronize());
}
/* The properties CuPy's host code reads (name, capability, sizes), not every field of
 * cudaDeviceProp. */
static PyObject *getDeviceProperties(int device, int skip) {
    int count, major, minor, processors;
    (void)skip;
    if (cudaGetDeviceCount(&count) || device < 0 || device >= count) {
        raise_status(101); /* cudaErrorInvalidDevice */
        return NULL;
    }
    cudaDeviceGetAttribute(&major, 75, device);
    cudaDeviceGetAttribute(&minor, 76, device);
    cudaDeviceGetAttribute(&processors, 16, device);
    return Py_BuildValue("{s:y,s:n,s:n,s:i,s:i,s:i,s:(iii),s:(iii),s:i,s:i,s:i,s:i,s:i,s:n}", "name", "null CUDA device",
                         "totalGlobalMem", (Py_ssize_t)80 << 30, "sharedMemPerBlock", (Py_ssize_t)49152,
                         "regsPerBlock", 65536, "warpSize", 32, "maxThreadsPerBlock", 1024, "maxThreadsDim", 1024,
                         1024, 64, "maxGridSize", 2147483647, 65535, 65535, "major", major, "minor", minor,
                         "multiProcessorCount", processors, "pciBusID", device + 1, "maxThreadsPerMultiProcessor",
                         2048, "l2CacheSize", (Py_ssize_t)52428800);
}
static int deviceCanAccessPeer(int device, int peer, int skip) {
    int can;
    (void)skip;
    RETURN_INT(cudaDeviceCanAccessPeer(&can, device, peer), can);
}
static PyObject *deviceEnablePeerAccess(int peer, int skip) {
    (void)skip;
    RETURN_NONE(cudaDeviceEnablePeerAccess(peer, 0));
}
static size_t deviceGetLimit(int limit, int skip) {
    size_t v;
    int status = cudaDeviceGetLimit(&v, limit);
    (void)skip;
    if (status) {
        raise_status(status);
        return (size_t)-1;
    }
    return v;
}
static PyObject *deviceSetLimit(int limit, size_t value, int skip) {
    (void)skip;
    RETURN_NONE(cudaDeviceSetLimit(limit, value));
}
static intptr_t malloc_(size_t size, int skip) {
    void *p;
    (void)skip;
    RETURN_PTR(cudaMalloc(&p, size), p);
}
static intptr_t mallocManaged(size_t size, int skip, struct opt_unsigned *opt) {
    void *p;
    (void)skip;
    RETURN_PTR(cudaMallocManaged(&p, size, opt && opt->n > 0 ? opt->value : 1), p);
}
static intptr_t mallocAsync(size_t size, intptr_t stream, int skip) {
    void *p;
    (void)skip;
    RETURN_PTR(cudaMallocAsync(&p, size, P(stream)), p);
}
static intptr_t hostAlloc(size_t size, unsigned flags, int skip) {
    void *p;
    (void)skip;
    RETURN_PTR(cudaHostAlloc(&p, size, flags), p);
}
static PyObject *hostRegister(intptr_t ptr, size_t size, unsigned flags, int skip) {
    (void)skip;
    RETURN_NONE(cudaHostRegister(P(ptr), size, flags));
}
static PyObject *hostUnregister(intptr_t ptr, int skip) {
    (void)skip;
    RETURN_NONE(cudaHostUnregister(P(ptr)));
}
static PyObject *free_(intptr_t ptr, int skip) {
    (void)skip;
    RETURN_NONE(cudaFree(P(ptr)));
}
static PyObject *freeHost(intptr_t ptr, int skip) {
    (void)skip;
    RETURN_NONE(cudaFreeHost(P(ptr)));
}
static PyObject *freeAsync(intptr_t ptr, intptr_t stream, int skip) {
    (void)skip;
    RETURN_NONE(cudaFreeAsync(P(ptr), P(stream)));
}
static PyObject *memGetInfo(int skip) {
    size_t free_bytes, total;
    int status = cudaMemGetInfo(&free_bytes, &total);
    (void)skip;
    if (status) {
        raise_status(status);
        return NULL;
    }
    return Py_BuildValue("(nn)", (Py_ssize_t)free_bytes, (Py_ssize_t)total);
}
static PyObject *memcpy_(intptr_t dst, intptr_t src, size_t size, int kind, int skip) {
    (void)skip;
    RETURN_NONE(cudaMemcpy(P(dst), P(src), size, kind));
}
static PyObject *memcpyAsync(intptr_t dst, intptr_t src, size_t size, int kind, intptr_t stream, int skip) {
    (void)skip;
    RETURN_NONE(cudaMemcpyAsync(P(dst), P(src), size, kind, P(stream)));
}
static PyObject *memcpyPeer(intptr_t dst, int dd, intptr_t src, int sd, size_t size, int skip) {
    (void)skip;
    RETURN_NONE(cudaMemcpyPeer(P(dst), dd, P(src), sd, size));
}
static PyObject *memcpyPeerAsync(intptr_t dst, int dd, intptr_t src, int sd, size_t size, intptr_t stream, int skip) {
    (void)skip;
    RETURN_NONE(cudaMemcpyPeerAsync(P(dst), dd, P(src), sd, size, P(stream)));
}
static PyObject *memcpy2D(intptr_t dst, size_t dpitch, intptr_t src, size_t spitch, size_t width, size_t height,
                          int kind, int skip) {
    (void)skip;
    RETURN_NONE(cudaMemcpy2D(P(dst), dpitch, P(src), spitch, width, height, kind));
}
static PyObject *memcpy2DAsync(intptr_t dst, size_t dpitch, intptr_t src, size_t spitch, size_t width, size_t height,
                               int kind, intptr_t stream, int skip) {
    (void)skip;
    RETURN_NONE(cudaMemcpy2DAsync(P(dst), dpitch, P(src), spitch, width, height, kind, P(stream)));
}
static PyObject *memset_(intptr_t ptr, int value, size_t size, int skip) {
    (void)skip;
    RETURN_NONE(cudaMemset(P(ptr), value, size));
}
static PyObject *memsetAsync(intptr_t ptr, int value, size_t size, intptr_t stream, int skip) {
    (void)skip;
    RETURN_NONE(cudaMemsetAsync(P(ptr), value, size, P(stream)));
}
static PyObject *memPrefetchAsync(intptr_t ptr, size_t count, int device, intptr_t stream, int skip) {
    (void)skip;
    RETURN_NONE(cudaMemPrefetchAsync(P(ptr), count, device, P(stream)));
}
static PyObject *memAdvise(intptr_t ptr, size_t count, int advice, int device, int skip) {
    (void)skip;
    RETURN_NONE(cudaMemAdvise(P(ptr), count, advice, device));
}
static PyObject *pointerGetAttributes(intptr_t ptr, int skip) {
    int type, device;
    (void)skip;
    nullcuda_pointer(P(ptr), &type, &device);
    if (!pointer_attributes) {
        PyErr_SetString(PyExc_RuntimeError, "null CUDA: the runtime shim is not bound");
        return NULL;
    }
    /* PointerAttributes(device, devicePointer, hostPointer, type): all memory is host memory */
    return PyObject_CallFunction(pointer_attributes, "inni", device, (Py_ssize_t)(type ? ptr : 0), (Py_ssize_t)ptr,
                                 type);
}
static int pointerGetMemoryType(intptr_t ptr, int skip) {
    int type, device;
    (void)skip;
    nullcuda_pointer(P(ptr), &type, &device);
    return type;
}
static intptr_t streamCreate(int skip) {
    void *s;
    (void)skip;
    RETURN_PTR(cudaStreamCreate(&s), s);
}
static intptr_t streamCreateWithFlags(unsigned flags, int skip) {
    void *s;
    (void)skip;
    RETURN_PTR(cudaStreamCreateWithFlags(&s, flags), s);
}
static intptr_t streamCreateWithPriority(unsigned flags, int priority, int skip) {
    void *s;
    (void)skip;
    RETURN_PTR(cudaStreamCreateWithPriority(&s, flags, priority), s);
}
static unsigned streamGetFlags(intptr_t stream, int skip) {
    unsigned flags;
    int status = cudaStreamGetFlags(P(stream), &flags);
    (void)skip;
    if (status) {
        raise_status(status);
        return 0;
    }
    return flags;
}
static int streamGetPriority(intptr_t stream, int skip) {
    int priority;
    int status = cudaStreamGetPriority(P(stream), &priority);
    (void)skip;
    if (status) {
        raise_status(status);
        return 0;
    }
    return priority;
}
static PyObject *streamDestroy(intptr_t stream, int skip) {
    (void)skip;
    RETURN_NONE(cudaStreamDestroy(P(stream)));
}
static PyObject *streamSynchronize(intptr_t stream, int skip) {
    (void)skip;
    RETURN_NONE(cudaStreamSynchronize(P(stream)));
}
static PyObject *streamQuery(intptr_t stream, int skip) { /* CuPy returns the status */
    (void)skip;
    return PyLong_FromLong(cudaStreamQuery(P(stream)));
}
/* Host callbacks: nothing is queued, so they run now, on the calling thread. */
static PyObject *streamAddCallback(intptr_t stream, PyObject *callback, intptr_t arg, int skip,
                                   struct opt_unsigned *opt) {
    (void)skip; (void)opt;
    return PyObject_CallFunction(callback, "nin", (Py_ssize_t)stream, 0, (Py_ssize_t)arg);
}
static PyObject *launchHostFunc(intptr_t stream, PyObject *callback, intptr_t arg, int skip) {
    (void)skip; (void)stream;
    return PyObject_CallFunction(callback, "n", (Py_ssize_t)arg);
}
static PyObject *launchHostFuncUnmanaged(intptr_t stream, PyObject *func_arg, int skip) {
    PyObject *func, *arg;
    (void)skip; (void)stream;
    if (!PyArg_ParseTuple(func_arg, "OO", &func, &arg))
        return NULL;
    return PyObject_CallOneArg(func, arg);
}
static PyObject *streamWaitEvent(intptr_t stream, intptr_t event, int skip, struct opt_unsigned *opt) {
    (void)skip;
    RETURN_NONE(cudaStreamWaitEvent(P(stream), P(event), opt && opt->n > 0 ? opt->value : 0));
}
/* Graph capture is not modelled: CuPy's error, as for a stream that cannot capture. */
static PyObject *streamBeginCapture(intptr_t stream, int skip, struct opt_int *opt) {
    (void)stream; (void)skip; (void)opt;
    RETURN_NONE(NOT_SUPPORTED);
}
static intptr_t streamEndCapture(intptr_t stream, int skip) {
    (void)stream; (void)skip;
    RETURN_PTR(NOT_SUPPORTED, 0);
}
static int streamIsCapturing(intptr_t stream, int skip) {
    int capturing;
    int status = cudaStreamIsCapturing(P(stream), &capturing);
    (void)skip;
    if (status) {
        raise_status(status);
        return 0;
    }
    return capturing;
}
static intptr_t eventCreate(int skip) {
    void *e;
    (void)skip;
    RETURN_PTR(cudaEventCreate(&e), e);
}
static intptr_t eventCreateWithFlags(unsigned flags, int skip) {
    void *e;
    (void)skip;
    RETURN_PTR(cudaEventCreateWithFlags(&e, flags), e);
}
static PyObject *eventDestroy(intptr_t event, int skip) {
    (void)skip;
    RETURN_NONE(cudaEventDestroy(P(event)));
}
static float eventElapsedTime(intptr_t start, intptr_t end, int skip) {
    float ms;
    int status = cudaEventElapsedTime(&ms, P(start), P(end));
    (void)skip;
    if (status) {
        raise_status(status);
        return 0;
    }
    return ms;
}
static PyObject *eventQuery(intptr_t event, int skip) {
    (void)skip;
    RETURN_NONE(cudaEventQuery(P(event)));
}
static PyObject *eventRecord(intptr_t event, intptr_t stream, int skip) {
    (void)skip;
    RETURN_NONE(cudaEventRecord(P(event), P(stream)));
}
static PyObject *eventSynchronize(intptr_t event, int skip) {
    (void)skip;
    RETURN_NONE(cudaEventSynchronize(P(event)));
}
static PyObject *ensure_context(void) { Py_RETURN_NONE; } /* contexts need no creation here */
static PyObject *profiler(int skip) {
    (void)skip;
    Py_RETURN_NONE;
}

/* name, the Cython signature it must have in the runtime module, the function */
typedef struct {
    const char *name, *signature;
    void *function;
} routed;

#define SKIP "int __pyx_skip_dispatch"
#define OPT(f) "struct __pyx_opt_args_13cupy_backends_4cuda_3api_7runtime_" f " *__pyx_optional_args"
static const routed ROUTED[] = {
    {"driverGetVersion", "int (" SKIP ")", P(driverGetVersion)},
    {"runtimeGetVersion", "int (" SKIP ")", P(runtimeGetVersion)},
    {"_getCUDAMajorVersion", "int (" SKIP ")", P(getCUDAMajorVersion)},
    {"getDevice", "int (" SKIP ")", P(getDevice)},
    {"deviceGetAttribute", "int (int, int, " SKIP ")", P(deviceGetAttribute)},
    {"getDeviceCount", "int (" SKIP ")", P(getDeviceCount)},
    {"setDevice", "PyObject *(int, " SKIP ")", P(setDevice)},
    {"deviceSynchronize", "PyObject *(" SKIP ")", P(deviceSynchronize)},
    {"getDeviceProperties", "PyObject *(int, " SKIP ")", P(getDeviceProperties)},
    {"deviceCanAccessPeer", "int (int, int, " SKIP ")", P(deviceCanAccessPeer)},
    {"deviceEnablePeerAccess", "PyObject *(int, " SKIP ")", P(deviceEnablePeerAccess)},
    {"_deviceEnsurePeerAccess", "PyObject *(int, " SKIP ")", P(deviceEnablePeerAccess)},
    {"deviceGetLimit", "size_t (int, " SKIP ")", P(deviceGetLimit)},
    {"deviceSetLimit", "PyObject *(int, size_t, " SKIP ")", P(deviceSetLimit)},
    {"malloc", "intptr_t (size_t, " SKIP ")", P(malloc_)},
    {"mallocManaged", "intptr_t (size_t, " SKIP ", " OPT("mallocManaged") ")", P(mallocManaged)},
    {"mallocAsync", "intptr_t (size_t, intptr_t, " SKIP ")", P(mallocAsync)},
    {"hostAlloc", "intptr_t (size_t, unsigned int, " SKIP ")", P(hostAlloc)},
    {"hostRegister", "PyObject *(intptr_t, size_t, unsigned int, " SKIP ")", P(hostRegister)},
    {"hostUnregister", "PyObject *(intptr_t, " SKIP ")", P(hostUnregister)},
    {"free", "PyObject *(intptr_t, " SKIP ")", P(free_)},
    {"freeHost", "PyObject *(intptr_t, " SKIP ")", P(freeHost)},
    {"freeAsync", "PyObject *(intptr_t, intptr_t, " SKIP ")", P(freeAsync)},
    {"memGetInfo", "PyObject *(" SKIP ")", P(memGetInfo)},
    {"memcpy", "PyObject *(intptr_t, intptr_t, size_t, int, " SKIP ")", P(memcpy_)},
    {"memcpyAsync", "PyObject *(intptr_t, intptr_t, size_t, int, intptr_t, " SKIP ")", P(memcpyAsync)},
    {"memcpyPeer", "PyObject *(intptr_t, int, intptr_t, int, size_t, " SKIP ")", P(memcpyPeer)},
    {"memcpyPeerAsync", "PyObject *(intptr_t, int, intptr_t, int, size_t, intptr_t, " SKIP ")", P(memcpyPeerAsync)},
    {"memcpy2D", "PyObject *(intptr_t, size_t, intptr_t, size_t, size_t, size_t, cudaMemcpyKind, " SKIP ")",
     P(memcpy2D)},
    {"memcpy2DAsync",
     "PyObject *(intptr_t, size_t, intptr_t, size_t, size_t, size_t, cudaMemcpyKind, intptr_t, " SKIP ")",
     P(memcpy2DAsync)},
    {"memset", "PyObject *(intptr_t, int, size_t, " SKIP ")", P(memset_)},
    {"memsetAsync", "PyObject *(intptr_t, int, size_t, intptr_t, " SKIP ")", P(memsetAsync)},
    {"memPrefetchAsync", "PyObject *(intptr_t, size_t, int, intptr_t, " SKIP ")", P(memPrefetchAsync)},
    {"memAdvise", "PyObject *(intptr_t, size_t, int, int, " SKIP ")", P(memAdvise)},
    {"pointerGetAttributes",
     "struct __pyx_obj_13cupy_backends_4cuda_3api_7runtime_PointerAttributes *(intptr_t, " SKIP ")",
     P(pointerGetAttributes)},
    {"pointerGetMemoryType", "int (intptr_t, " SKIP ")", P(pointerGetMemoryType)},
    {"streamCreate", "intptr_t (" SKIP ")", P(streamCreate)},
    {"streamCreateWithFlags", "intptr_t (unsigned int, " SKIP ")", P(streamCreateWithFlags)},
    {"streamCreateWithPriority", "intptr_t (unsigned int, int, " SKIP ")", P(streamCreateWithPriority)},
    {"streamGetFlags", "unsigned int (intptr_t, " SKIP ")", P(streamGetFlags)},
    {"streamGetPriority", "int (intptr_t, " SKIP ")", P(streamGetPriority)},
    {"streamDestroy", "PyObject *(intptr_t, " SKIP ")", P(streamDestroy)},
    {"streamSynchronize", "PyObject *(intptr_t, " SKIP ")", P(streamSynchronize)},
    {"streamQuery", "PyObject *(intptr_t, " SKIP ")", P(streamQuery)},
    {"streamAddCallback", "PyObject *(intptr_t, PyObject *, intptr_t, " SKIP ", " OPT("streamAddCallback") ")",
     P(streamAddCallback)},
    {"launchHostFunc", "PyObject *(intptr_t, PyObject *, intptr_t, " SKIP ")", P(launchHostFunc)},
    {"_launchHostFuncUnmanaged", "PyObject *(intptr_t, PyObject *, " SKIP ")", P(launchHostFuncUnmanaged)},
    {"streamWaitEvent", "PyObject *(intptr_t, intptr_t, " SKIP ", " OPT("streamWaitEvent") ")", P(streamWaitEvent)},
    {"streamBeginCapture", "PyObject *(intptr_t, " SKIP ", " OPT("streamBeginCapture") ")", P(streamBeginCapture)},
    {"streamEndCapture", "intptr_t (intptr_t, " SKIP ")", P(streamEndCapture)},
    {"streamIsCapturing", "int (intptr_t, " SKIP ")", P(streamIsCapturing)},
    {"eventCreate", "intptr_t (" SKIP ")", P(eventCreate)},
    {"eventCreateWithFlags", "intptr_t (unsigned int, " SKIP ")", P(eventCreateWithFlags)},
    {"eventDestroy", "PyObject *(intptr_t, " SKIP ")", P(eventDestroy)},
    {"eventElapsedTime", "float (intptr_t, intptr_t, " SKIP ")", P(eventElapsedTime)},
    {"eventQuery", "PyObject *(intptr_t, " SKIP ")", P(eventQuery)},
    {"eventRecord", "PyObject *(intptr_t, intptr_t, " SKIP ")", P(eventRecord)},
    {"eventSynchronize", "PyObject *(intptr_t, " SKIP ")", P(eventSynchronize)},
    {"_ensure_context", "PyObject *(void)", P(ensure_context)},
    {"profilerStart", "PyObject *(" SKIP ")", P(profiler)},
    {"profilerStop", "PyObject *(" SKIP ")", P(profiler)},
};

/* routed() -> {name: (signature, capsule named by the signature, address)} */
static PyObject *routed_functions(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    PyObject *table = PyDict_New();
    if (!table)
        return NULL;
    for (size_t i = 0; i < sizeof ROUTED / sizeof ROUTED[0]; i++) {
        PyObject *capsule = PyCapsule_New(ROUTED[i].function, ROUTED[i].signature, NULL);
        PyObject *entry = capsule ? Py_BuildValue("(sNn)", ROUTED[i].signature, capsule,
                                                  (Py_ssize_t)(intptr_t)ROUTED[i].function)
                                  : NULL;
        if (!entry || PyDict_SetItemString(table, ROUTED[i].name, entry) < 0) {
            Py_XDECREF(entry);
            Py_DECREF(table);
            return NULL;
        }
        Py_DECREF(entry);
    }
    return table;
}

/* bind(check_status_capsule, PointerAttributes): what the routed functions raise and build. */
static PyObject *bind(PyObject *self, PyObject *args) {
    PyObject *capsule, *cls;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO", &capsule, &cls))
        return NULL;
    void *pointer = PyCapsule_GetPointer(capsule, "PyObject *(int, " SKIP ")");
    if (!pointer)
        return NULL;
    check_status = (PyObject * (*)(int, int)) pointer;
    Py_XSETREF(pointer_attributes, Py_NewRef(cls));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"routed", routed_functions, METH_NOARGS, "{name: (signature, capsule, address)} of the routed functions."},
    {"bind", bind, METH_VARARGS, "bind(check_status_capsule, PointerAttributes)"},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_nullcuda_runtime", "CuPy's runtime module routed to the null CUDA (tests only).", 0,
    methods, slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__nullcuda_runtime(void) { return PyModuleDef_Init(&module); }
