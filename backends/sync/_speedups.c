/* The compiled path of the sync layer's per-step and per-launch checks, for when nothing
 * changed. The pure-Python code is the reference and defines every behaviour; this file only
 * answers "nothing changed" faster and calls that code for everything else:
 *
 *   sync()          backends.sync.sync: the device, this context's frame and the defaults'
 *                   version equal this thread's last push: return; else the pure _push();
 *   forget()        backends.sync.invalidate: drop this thread's record of its last push;
 *   StepperCore     backends.asyncio's synced: sync() (nothing it raises reaches the task),
 *                   then the coroutine's own step;
 *   FastPrepare     backends.sync.cublas.prepare: the handle's record says this frame,
 *                   this version and the math mode on the handle: return it; else the pure
 *                   prepare.
 *
 * This thread's record lives in the thread state dict (one tuple, replaced whole). Built for
 * the GIL build of CPython only (see hatch_build.py), with backends._engine._speedups.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* Set by configure(): the engine's ContextVar and its default, the state module's namespace
 * (for "version"), the sync package's namespace (for "_device_query") and its _push. */
static PyObject *overrides_var = NULL;
static PyObject *no_scope = NULL;
static PyObject *state_dict = NULL;
static PyObject *sync_dict = NULL;
static PyObject *push = NULL;
static PyObject *str_version = NULL;
static PyObject *str_query = NULL;
static PyObject *record_key = NULL; /* this thread's last push, in the thread state dict */

static int
configured(void)
{
    if (push == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "backends.sync._speedups is not configured");
        return 0;
    }
    return 1;
}

/* 1 if a and b are equal (identity first, as tuple comparison does), 0 if not, -1 on error */
static int
same(PyObject *a, PyObject *b)
{
    return a == b ? 1 : PyObject_RichCompareBool(a, b, Py_EQ);
}

static PyObject *
fast_sync(PyObject *module, PyObject *unused)
{
    if (!configured()) {
        return NULL;
    }
    PyObject *query = PyDict_GetItemWithError(sync_dict, str_query); /* borrowed */
    if (query == NULL || query == Py_None) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NONE; /* CuPy is not imported: nothing to push into */
    }
    Py_INCREF(query);
    PyObject *device = PyObject_CallNoArgs(query);
    Py_DECREF(query);
    if (device == NULL) {
        if (PyErr_ExceptionMatches(PyExc_Exception)) { /* no driver or no device */
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        return NULL;
    }
    PyObject *frame = NULL, *key = NULL, *result = NULL;
    if (PyContextVar_Get(overrides_var, no_scope, &frame) < 0) {
        goto done;
    }
    PyObject *version = PyDict_GetItemWithError(state_dict, str_version); /* borrowed */
    if (version == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "backends._engine.state has no version");
        }
        goto done;
    }
    PyObject *thread = PyThreadState_GetDict(); /* borrowed */
    PyObject *last = thread == NULL ? NULL : PyDict_GetItemWithError(thread, record_key);
    if (last == NULL && PyErr_Occurred()) {
        goto done;
    }
    if (last != NULL && PyTuple_CheckExact(last) && PyTuple_GET_SIZE(last) == 3 && PyTuple_GET_ITEM(last, 0) == frame) {
        int equal = same(PyTuple_GET_ITEM(last, 1), version);
        if (equal > 0) {
            equal = same(PyTuple_GET_ITEM(last, 2), device);
        }
        if (equal < 0) {
            goto done;
        }
        if (equal) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    key = PyTuple_Pack(3, frame, version, device);
    if (key == NULL) {
        goto done;
    }
    PyObject *pushed = PyObject_CallOneArg(push, device); /* the pure path's pushes; may raise */
    if (pushed == NULL) {
        goto done;
    }
    Py_DECREF(pushed);
    if (thread != NULL && PyDict_SetItem(thread, record_key, key) < 0) {
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(key);
    Py_XDECREF(frame);
    Py_DECREF(device);
    return result;
}

static PyObject *
forget(PyObject *module, PyObject *unused)
{
    PyObject *thread = PyThreadState_GetDict();
    if (thread != NULL && record_key != NULL && PyDict_GetItemWithError(thread, record_key) != NULL) {
        if (PyDict_DelItem(thread, record_key) < 0) {
            return NULL;
        }
    }
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The stepper's module namespace and the sync it holds by default: a step calls the "sync"
 * found there (a test may replace it), in C when it is still backends.sync.sync. */
static PyObject *stepper_globals = NULL;
static PyObject *default_sync = NULL;
static PyObject *str_sync = NULL;
static PyObject *str_send = NULL;

/* sync() for a task step: nothing it raises reaches the task (backends.sync.quietly) */
static void
quiet_sync(void)
{
    PyObject *done;
    PyObject *chosen = stepper_globals == NULL ? NULL : PyDict_GetItemWithError(stepper_globals, str_sync);
    if (chosen == NULL && PyErr_Occurred()) {
        done = NULL;
    }
    else if (chosen == NULL || chosen == default_sync) {
        done = fast_sync(NULL, NULL);
    }
    else {
        Py_INCREF(chosen);
        done = PyObject_CallNoArgs(chosen);
        Py_DECREF(chosen);
    }
    if (done == NULL) {
        if (PyErr_ExceptionMatches(PyExc_Exception)) {
            PyErr_Clear();
        }
        /* a BaseException (KeyboardInterrupt) stays set: the step raises it, as the pure path */
    }
    else {
        Py_DECREF(done);
    }
}

/* -- the asyncio stepper ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *coro; /* synced._coro: the user's coroutine */
} StepperCore;

static PySendResult
stepper_am_send(PyObject *op, PyObject *arg, PyObject **result)
{
    StepperCore *self = (StepperCore *)op;
    quiet_sync();
    if (PyErr_Occurred()) {
        *result = NULL;
        return PYGEN_ERROR;
    }
    if (self->coro == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_coro");
        *result = NULL;
        return PYGEN_ERROR;
    }
    if (PyCoro_CheckExact(self->coro) || PyGen_CheckExact(self->coro)) {
        return PyIter_Send(self->coro, arg, result);
    }
    /* any other coroutine object: its send(value), as the pure stepper calls it */
    PyObject *sent = PyObject_CallMethodOneArg(self->coro, str_send, arg);
    if (sent != NULL) {
        *result = sent;
        return PYGEN_NEXT;
    }
    if (!PyErr_ExceptionMatches(PyExc_StopIteration)) {
        *result = NULL;
        return PYGEN_ERROR;
    }
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    PyObject *returned = value == NULL ? Py_NewRef(Py_None) : PyObject_GetAttrString(value, "value");
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    *result = returned;
    return returned == NULL ? PYGEN_ERROR : PYGEN_RETURN;
}

static PyObject *
step(PyObject *op, PyObject *arg)
{
    PyObject *result;
    PySendResult status = stepper_am_send(op, arg, &result);
    if (status == PYGEN_NEXT) {
        return result;
    }
    if (status == PYGEN_RETURN) { /* the coroutine returned: StopIteration(value), as a send() raises */
        PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, result);
        Py_DECREF(result);
        if (stop != NULL) {
            PyErr_SetObject(PyExc_StopIteration, stop);
            Py_DECREF(stop);
        }
    }
    return NULL;
}

static PyObject *
stepper_iternext(PyObject *op)
{
    return step(op, Py_None);
}

static PyObject *
stepper_send(PyObject *op, PyObject *value)
{
    return step(op, value);
}

static PyObject *
stepper_throw(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    StepperCore *self = (StepperCore *)op;
    quiet_sync();
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (self->coro == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_coro");
        return NULL;
    }
    PyObject *throw = PyObject_GetAttrString(self->coro, "throw");
    if (throw == NULL) {
        return NULL;
    }
    PyObject *result = PyObject_Vectorcall(throw, args, (size_t)nargs, NULL);
    Py_DECREF(throw);
    return result;
}

static int
stepper_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(((StepperCore *)op)->coro);
    return 0;
}

static int
stepper_clear(PyObject *op)
{
    Py_CLEAR(((StepperCore *)op)->coro);
    return 0;
}

static void
stepper_dealloc(PyObject *op)
{
    PyObject_GC_UnTrack(op);
    stepper_clear(op);
    Py_TYPE(op)->tp_free(op);
}

static PyMethodDef stepper_methods[] = {
    {"send", stepper_send, METH_O, "sync(), then the coroutine's send(value)."},
    {"throw", (PyCFunction)(void (*)(void))stepper_throw, METH_FASTCALL, "sync(), then the coroutine's throw(...)."},
    {NULL},
};

static PyMemberDef stepper_members[] = {
    {"_coro", T_OBJECT_EX, offsetof(StepperCore, coro), 0, "the coroutine stepped"},
    {NULL},
};

static PyAsyncMethods stepper_async = {
    .am_send = stepper_am_send,
};

static PyTypeObject StepperCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "backends.sync._speedups.StepperCore",
    .tp_basicsize = sizeof(StepperCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The compiled steps of backends.asyncio's synced.",
    .tp_as_async = &stepper_async,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = stepper_iternext,
    .tp_traverse = stepper_traverse,
    .tp_clear = stepper_clear,
    .tp_dealloc = stepper_dealloc,
    .tp_methods = stepper_methods,
    .tp_members = stepper_members,
};

/* -- cuBLAS: the per-launch check -------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *seen;    /* cublas._seen: handle -> (frame, version, modes, allow_tf32, deterministic) */
    PyObject *mode_on; /* cublas._mode_on: handle -> the math mode known to be set on it */
    PyObject *slow;    /* the pure path's prepare(handle, kind) */
    vectorcallfunc vectorcall;
} FastPrepare;

static PyObject *
prepare_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    FastPrepare *self = (FastPrepare *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1 || nargs > 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) || !configured()) {
        return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    }
    PyObject *handle = args[0];
    Py_ssize_t kind = 0; /* FP16 */
    if (nargs == 2) {
        kind = PyLong_AsSsize_t(args[1]);
        if (kind == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
        }
    }
    PyObject *seen = PyDict_GetItemWithError(self->seen, handle); /* borrowed */
    if (seen != NULL && PyTuple_CheckExact(seen) && PyTuple_GET_SIZE(seen) == 5) {
        PyObject *frame;
        if (PyContextVar_Get(overrides_var, no_scope, &frame) < 0) {
            return NULL;
        }
        int current = PyTuple_GET_ITEM(seen, 0) == frame;
        Py_DECREF(frame);
        PyObject *version = current ? PyDict_GetItemWithError(state_dict, str_version) : NULL;
        PyObject *modes = PyTuple_GET_ITEM(seen, 2);
        if (version != NULL && same(PyTuple_GET_ITEM(seen, 1), version) == 1 && PyTuple_CheckExact(modes) &&
            kind >= 0 && kind < PyTuple_GET_SIZE(modes)) {
            PyObject *on = PyDict_GetItemWithError(self->mode_on, handle);
            if (on != NULL && same(on, PyTuple_GET_ITEM(modes, kind)) == 1) {
                return Py_NewRef(seen);
            }
        }
    }
    if (PyErr_Occurred()) {
        PyErr_Clear(); /* the pure path raises what there is to raise */
    }
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static int
prepare_init(PyObject *op, PyObject *args, PyObject *kwargs)
{
    FastPrepare *self = (FastPrepare *)op;
    static char *keywords[] = {"seen", "mode_on", "slow", NULL};
    PyObject *seen, *mode_on, *slow;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O:FastPrepare", keywords, &PyDict_Type, &seen, &PyDict_Type,
                                     &mode_on, &slow)) {
        return -1;
    }
    Py_XSETREF(self->seen, Py_NewRef(seen));
    Py_XSETREF(self->mode_on, Py_NewRef(mode_on));
    Py_XSETREF(self->slow, Py_NewRef(slow));
    self->vectorcall = prepare_vectorcall;
    return 0;
}

static PyObject *
prepare_call(PyObject *op, PyObject *args, PyObject *kwargs)
{
    return PyObject_Call(((FastPrepare *)op)->slow, args, kwargs);
}

static PyObject *
prepare_getattro(PyObject *op, PyObject *name)
{
    return PyObject_GetAttr(((FastPrepare *)op)->slow, name); /* __doc__, __name__, ... */
}

static int
prepare_traverse(PyObject *op, visitproc visit, void *arg)
{
    FastPrepare *self = (FastPrepare *)op;
    Py_VISIT(self->seen);
    Py_VISIT(self->mode_on);
    Py_VISIT(self->slow);
    return 0;
}

static int
prepare_clear(PyObject *op)
{
    FastPrepare *self = (FastPrepare *)op;
    Py_CLEAR(self->seen);
    Py_CLEAR(self->mode_on);
    Py_CLEAR(self->slow);
    return 0;
}

static void
prepare_dealloc(PyObject *op)
{
    PyObject_GC_UnTrack(op);
    prepare_clear(op);
    Py_TYPE(op)->tp_free(op);
}

static PyTypeObject FastPrepareType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "backends.sync._speedups.FastPrepare",
    .tp_basicsize = sizeof(FastPrepare),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(FastPrepare, vectorcall),
    .tp_call = prepare_call,
    .tp_new = PyType_GenericNew,
    .tp_init = prepare_init,
    .tp_getattro = prepare_getattro,
    .tp_traverse = prepare_traverse,
    .tp_clear = prepare_clear,
    .tp_dealloc = prepare_dealloc,
};

/* -- module ------------------------------------------------------------------------------ */

static PyObject *
configure(PyObject *module, PyObject *args)
{
    PyObject *var, *empty, *state, *sync, *push_;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O:configure", &PyContextVar_Type, &var, &PyDict_Type, &empty, &PyDict_Type,
                          &state, &PyDict_Type, &sync, &push_)) {
        return NULL;
    }
    Py_XSETREF(overrides_var, Py_NewRef(var));
    Py_XSETREF(no_scope, Py_NewRef(empty));
    Py_XSETREF(state_dict, Py_NewRef(state));
    Py_XSETREF(sync_dict, Py_NewRef(sync));
    Py_XSETREF(push, Py_NewRef(push_));
    Py_RETURN_NONE;
}

static PyObject *
configure_stepper(PyObject *module, PyObject *args)
{
    PyObject *globals, *sync;
    if (!PyArg_ParseTuple(args, "O!O:configure_stepper", &PyDict_Type, &globals, &sync)) {
        return NULL;
    }
    Py_XSETREF(stepper_globals, Py_NewRef(globals));
    Py_XSETREF(default_sync, Py_NewRef(sync));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure_stepper", configure_stepper, METH_VARARGS,
     "configure_stepper(vars(backends.integrations.asyncio), backends.sync.sync): where a step finds sync."},
    {"configure", configure, METH_VARARGS,
     "configure(overrides, NO_SCOPE, vars(state), vars(backends.sync), _push): what sync() reads and calls."},
    {"sync", fast_sync, METH_NOARGS, "backends.sync.sync(), answering 'nothing changed' in C."},
    {"forget", forget, METH_NOARGS, "backends.sync.invalidate(): drop this thread's record of its last push."},
    {NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "backends.sync._speedups",
    .m_doc = "The compiled path of the sync layer's checks when nothing changed (see the C source).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    StepperCoreType.tp_new = PyBaseObject_Type.tp_new;
    if (PyType_Ready(&StepperCoreType) < 0 || PyType_Ready(&FastPrepareType) < 0) {
        return NULL;
    }
    str_sync = PyUnicode_InternFromString("sync");
    str_send = PyUnicode_InternFromString("send");
    str_version = PyUnicode_InternFromString("version");
    str_query = PyUnicode_InternFromString("_device_query");
    record_key = PyUnicode_InternFromString("backends.sync: last push");
    if (str_sync == NULL || str_send == NULL || str_version == NULL || str_query == NULL || record_key == NULL) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "StepperCore", (PyObject *)&StepperCoreType) < 0 ||
        PyModule_AddObjectRef(module, "FastPrepare", (PyObject *)&FastPrepareType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
