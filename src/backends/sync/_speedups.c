/* The compiled path of the sync layer's per-step and per-launch checks, for when nothing
 * changed. The pure-Python code is the reference and defines every behaviour; this file only
 * answers "nothing changed" faster and calls that code for everything else:
 *
 *   sync()          backends.sync.sync: first the engine's mirror (a library's settings
 *                   following the flags: torch), through its capsule _mirror_sync; then, where
 *                   the device, this context's frame and the defaults' version equal this
 *                   thread's last push: return; else the pure _push();
 *   forget()        backends.sync.invalidate: drop this thread's record of its last push;
 *   StepperCore     backends.asyncio's synced: sync() (nothing it raises reaches the task),
 *                   then the coroutine's own step;
 *   fast_prepare()  backends.sync.cublas.prepare: a FastPrepare, whose call returns the
 *                   handle's record when it says this frame, this version and the math mode
 *                   on the handle; else calls the pure prepare;
 *   fast_routine()  a wrapped cuBLAS routine (backends.sync.cublas.wrapper): a CublasRoutine,
 *                   which does the pure wrapper's work for the calls CuPy makes and calls that
 *                   wrapper for every other call.
 *
 * Written as CPython's own extension modules are (PEP 489, PEP 573, PEP 630): multi-phase
 * initialisation, every piece of configuration and every interned string in the module's
 * state (no C static holds a Python object), heap types made for each module object. So each
 * import of the module (a sub-interpreter's, or a second one after sys.modules was purged of
 * backends) has its own state, and reads only what its own copy of backends configured.
 * A StepperCore or a FastPrepare holds a strong reference to the module whose state it reads (a
 * CublasRoutine holds its FastPrepare).
 *
 * No borrowed reference is held across a call that can run Python code (a __hash__, an
 * __eq__, a finaliser run by an allocation): what is taken from a dict is owned until used.
 *
 * This thread's record lives in the thread state dict (one tuple, replaced whole), under a key
 * that belongs to this module object. Built for the GIL build of CPython only (the free-threaded
 * build takes the pure-Python path; see setup.py), with backends._engine._speedups.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h> /* offsetof */

/* The version of the interface between this file and the Python code that uses it, stored as the
 * module's INTERFACE: the Python code (backends/_engine/accelerator.py, INTERFACES) leaves a
 * module built for another one unused. Bump both with any change of what one expects of the other. */
#define BACKENDS_INTERFACE 2

#ifdef Py_GIL_DISABLED
#error "backends.sync._speedups relies on the GIL: a free-threaded CPython uses the pure-Python sync layer"
#endif

#if PY_VERSION_HEX >= 0x030C0000
#define MEMBER_OBJECT_EX Py_T_OBJECT_EX
#define MEMBER_SSIZE_T Py_T_PYSSIZET
#define MEMBER_READONLY Py_READONLY
#else
#include <structmember.h>
#define MEMBER_OBJECT_EX T_OBJECT_EX
#define MEMBER_SSIZE_T T_PYSSIZET
#define MEMBER_READONLY READONLY
#endif

typedef struct {
    /* Set by configure(): the engine's ContextVar and its default, the state module's namespace
     * (for "version"), the sync package's namespace (for "_device_query") and its _push. */
    PyObject *overrides_var;
    PyObject *no_scope;
    PyObject *state_dict;
    PyObject *sync_dict;
    PyObject *push;
    PyObject *engine;                   /* backends._engine._speedups, whose mirror sync() brings in step */
    int (*mirror_sync)(PyObject *engine); /* from its capsule _mirror_sync */
    /* Set by configure_stepper(): the stepper's module namespace and the sync it holds by
     * default: a step calls the "sync" found there (a test may replace it), in C when it is
     * still backends.sync.sync. */
    PyObject *stepper_globals;
    PyObject *default_sync;
    /* Made when the module is executed. */
    PyObject *str_sync;
    PyObject *str_send;
    PyObject *str_throw;
    PyObject *str_version;
    PyObject *str_query;
    PyObject *str_streams; /* "cupy.cuda.stream" */
    PyObject *str_gemm;
    PyObject *record_key; /* this thread's last push, in the thread state dict: an object() */
    PyTypeObject *stepper_type;
    PyTypeObject *prepare_type;
    PyTypeObject *routine_type;
} sync_state;

static struct PyModuleDef speedups_def;

static inline sync_state *
get_state(PyObject *module)
{
    return (sync_state *)PyModule_GetState(module);
}

/* The module whose heap type is in type's MRO (borrowed), or NULL with TypeError set. */
static PyObject *
module_of_type(PyTypeObject *type)
{
    return PyType_GetModuleByDef(type, &speedups_def);
}

/* *result: a strong reference to dict[key], or NULL when it is not there. 1 if found, 0 if
 * not, -1 with an exception set. */
static int
dict_get_ref(PyObject *dict, PyObject *key, PyObject **result)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyDict_GetItemRef(dict, key, result);
#else
    PyObject *item = PyDict_GetItemWithError(dict, key); /* borrowed, owned at once */
    if (item == NULL) {
        *result = NULL;
        return PyErr_Occurred() ? -1 : 0;
    }
    *result = Py_NewRef(item);
    return 1;
#endif
}

static int
configured(sync_state *state)
{
    if (state->push == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "backends.sync._speedups is not configured: backends.sync.compiled() configures it");
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

/* The StopIteration that a generator's send() raises when it returns value, as CPython makes
 * it: StopIteration() for None, else an instance made with value as its one argument (so a
 * tuple or an exception is the value, not the arguments). */
static void
set_stop_iteration(PyObject *value)
{
    if (value == Py_None) {
        PyErr_SetNone(PyExc_StopIteration);
        return;
    }
    PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, value);
    if (stop != NULL) {
        PyErr_SetObject(PyExc_StopIteration, stop);
        Py_DECREF(stop);
    }
}

/* The StopIteration set (of any subclass) taken as a return: its value into *result. Any other
 * exception stays set. As PyIter_Send reads a step that raised. */
static PySendResult
take_stop_iteration(PyObject **result)
{
    *result = NULL;
    if (!PyErr_ExceptionMatches(PyExc_StopIteration)) {
        return PYGEN_ERROR;
    }
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *stop = PyErr_GetRaisedException();
    PyObject *value = ((PyStopIterationObject *)stop)->value;
    *result = Py_NewRef(value == NULL ? Py_None : value);
    Py_DECREF(stop);
#else
    PyObject *type, *stop, *traceback;
    PyErr_Fetch(&type, &stop, &traceback);
    PyErr_NormalizeException(&type, &stop, &traceback);
    if (stop == NULL || !PyObject_TypeCheck(stop, (PyTypeObject *)PyExc_StopIteration)) {
        PyErr_Restore(type, stop, traceback); /* normalising it failed: that error */
        return PYGEN_ERROR;
    }
    PyObject *value = ((PyStopIterationObject *)stop)->value;
    *result = Py_NewRef(value == NULL ? Py_None : value);
    Py_XDECREF(type);
    Py_DECREF(stop);
    Py_XDECREF(traceback);
#endif
    return PYGEN_RETURN;
}

/* -- sync() ------------------------------------------------------------------------------ */

static PyObject *
sync_with(sync_state *state)
{
    if (!configured(state)) {
        return NULL;
    }
    if (state->mirror_sync != NULL) {
        PyObject *engine = Py_NewRef(state->engine);
        int failed = state->mirror_sync(engine);
        Py_DECREF(engine);
        if (failed) {
            return NULL;
        }
    }
    PyObject *query = NULL;
    if (dict_get_ref(state->sync_dict, state->str_query, &query) < 0) {
        return NULL;
    }
    if (query == NULL || query == Py_None) {
        Py_XDECREF(query);
        Py_RETURN_NONE; /* CuPy is not imported: nothing to push into */
    }
    PyObject *device = PyObject_CallNoArgs(query); /* runs Python: state is read again below */
    Py_DECREF(query);
    if (device == NULL) {
        if (PyErr_ExceptionMatches(PyExc_Exception)) { /* no driver or no device */
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        return NULL;
    }
    PyObject *frame = NULL, *version = NULL, *thread = NULL, *last = NULL, *key = NULL, *push = NULL;
    PyObject *record_key = NULL, *result = NULL;
    if (!configured(state)) {
        goto done;
    }
    record_key = Py_NewRef(state->record_key);
    if (PyContextVar_Get(state->overrides_var, state->no_scope, &frame) < 0) {
        goto done;
    }
    if (dict_get_ref(state->state_dict, state->str_version, &version) < 0) {
        goto done;
    }
    if (version == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "backends._engine.state has no version");
        goto done;
    }
    thread = Py_XNewRef(PyThreadState_GetDict());
    if (thread != NULL && dict_get_ref(thread, record_key, &last) < 0) {
        goto done;
    }
    if (last != NULL && PyTuple_CheckExact(last) && PyTuple_GET_SIZE(last) == 3 && PyTuple_GET_ITEM(last, 0) == frame) {
        /* each comparison can run Python (a device id's __eq__): last, version and device are
         * owned here, so whatever it rebinds or drops stays alive until done */
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
    push = Py_NewRef(state->push);
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
    Py_XDECREF(push);
    Py_XDECREF(key);
    Py_XDECREF(last);
    Py_XDECREF(thread);
    Py_XDECREF(version);
    Py_XDECREF(frame);
    Py_XDECREF(record_key);
    Py_DECREF(device);
    return result;
}

static PyObject *
fast_sync(PyObject *module, PyObject *unused)
{
    return sync_with(get_state(module));
}

static PyObject *
forget(PyObject *module, PyObject *unused)
{
    sync_state *state = get_state(module);
    PyObject *thread = PyThreadState_GetDict(); /* borrowed; nothing below runs Python first */
    if (thread == NULL || state->record_key == NULL) {
        Py_RETURN_NONE;
    }
    int present = PyDict_Contains(thread, state->record_key);
    if (present < 0 || (present && PyDict_DelItem(thread, state->record_key) < 0)) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
last_push(PyObject *module, PyObject *unused)
{
    sync_state *state = get_state(module);
    PyObject *thread = PyThreadState_GetDict(), *last = NULL;
    if (thread == NULL || state->record_key == NULL) {
        Py_RETURN_NONE;
    }
    if (dict_get_ref(thread, state->record_key, &last) < 0) {
        return NULL;
    }
    return last == NULL ? Py_NewRef(Py_None) : last;
}

/* -- the asyncio stepper ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *module; /* this module object, for its state (strong) */
    PyObject *coro;   /* synced._coro: the user's coroutine, as __init__ was given it */
    /* What the steps step, bound by __init__ as the pure synced binds its _send and _throw (so
     * rebinding _coro changes what it shows, not what it steps, on both engines): */
    PyObject *native; /* a coroutine or generator (exact types): stepped with PyIter_Send */
    PyObject *send;   /* any other coroutine object: its bound send() */
    PyObject *throw_; /* and its bound throw() */
} StepperCore;

/* sync() for a task step: nothing it raises reaches the task (backends.sync.quietly). -1 with
 * a BaseException that is not an Exception (KeyboardInterrupt) set: the step raises it, as the
 * pure path does. */
static int
quiet_sync(StepperCore *self)
{
    if (self->module == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this stepper was cleared");
        return -1;
    }
    PyObject *module = Py_NewRef(self->module);
    sync_state *state = get_state(module);
    PyObject *chosen = NULL, *done;
    if (state->stepper_globals != NULL && dict_get_ref(state->stepper_globals, state->str_sync, &chosen) < 0) {
        done = NULL;
    }
    else if (chosen == NULL || chosen == state->default_sync) {
        done = sync_with(state);
    }
    else {
        done = PyObject_CallNoArgs(chosen);
    }
    Py_XDECREF(chosen);
    Py_DECREF(module);
    if (done == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) {
            return -1;
        }
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(done);
    return 0;
}

/* As the pure synced's __getattr__ says it, for the bound method a step needs. */
static void
not_initialised(StepperCore *self, const char *name)
{
    const char *type = Py_TYPE(self)->tp_name, *dot = strrchr(type, '.');
    PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%s' (its __init__ did not run)",
                 dot == NULL ? type : dot + 1, name);
}

static PySendResult
stepper_am_send(PyObject *op, PyObject *arg, PyObject **result)
{
    StepperCore *self = (StepperCore *)op;
    *result = NULL;
    if (quiet_sync(self) < 0) {
        return PYGEN_ERROR;
    }
    /* Owned for the whole step: the coroutine may rebind what this stepper steps while it runs. */
    if (self->native != NULL) {
        PyObject *native = Py_NewRef(self->native);
        PySendResult status = PyIter_Send(native, arg, result);
        Py_DECREF(native);
        return status;
    }
    if (self->send == NULL) {
        not_initialised(self, "_send");
        return PYGEN_ERROR;
    }
    PyObject *send = Py_NewRef(self->send);
    PyObject *sent = PyObject_CallOneArg(send, arg); /* its send(value), as the pure stepper calls it */
    Py_DECREF(send);
    if (sent != NULL) {
        *result = sent;
        return PYGEN_NEXT;
    }
    return take_stop_iteration(result);
}

/* __next__ and send(): as the pure stepper's, which return what the coroutine's send() returns
 * and raise what it raises. */
static PyObject *
step(StepperCore *self, PyObject *arg)
{
    if (quiet_sync(self) < 0) {
        return NULL;
    }
    if (self->native != NULL) {
        PyObject *native = Py_NewRef(self->native), *result = NULL;
        PySendResult status = PyIter_Send(native, arg, &result);
        Py_DECREF(native);
        if (status == PYGEN_RETURN) { /* the coroutine returned: StopIteration, as its send() raises */
            set_stop_iteration(result);
            Py_DECREF(result);
            return NULL;
        }
        return result; /* NULL with the exception set on PYGEN_ERROR */
    }
    if (self->send == NULL) {
        not_initialised(self, "_send");
        return NULL;
    }
    PyObject *send = Py_NewRef(self->send);
    PyObject *result = PyObject_CallOneArg(send, arg); /* raises what it raises, StopIteration subclasses included */
    Py_DECREF(send);
    return result;
}

static PyObject *
stepper_iternext(PyObject *op)
{
    return step((StepperCore *)op, Py_None);
}

static PyObject *
stepper_send(PyObject *op, PyObject *value)
{
    return step((StepperCore *)op, value);
}

static PyObject *
stepper_throw(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    StepperCore *self = (StepperCore *)op;
    if (quiet_sync(self) < 0) {
        return NULL;
    }
    PyObject *throw_;
    if (self->throw_ != NULL) {
        throw_ = Py_NewRef(self->throw_);
    }
    else if (self->native != NULL) {
        PyObject *native = Py_NewRef(self->native);
        throw_ = PyObject_GetAttr(native, get_state(self->module)->str_throw); /* a bound method: owns it */
        Py_DECREF(native);
        if (throw_ == NULL) {
            return NULL;
        }
    }
    else {
        not_initialised(self, "_throw");
        return NULL;
    }
    PyObject *result = PyObject_Vectorcall(throw_, args, (size_t)nargs, NULL);
    Py_DECREF(throw_);
    return result;
}

static PyObject *
stepper_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *module = module_of_type(type);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(module); /* before the allocation, which can run a finaliser */
    StepperCore *self = (StepperCore *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(module);
        return NULL;
    }
    self->module = module;
    return (PyObject *)self;
}

/* synced(coroutine): keeps coroutine as _coro and binds what the steps step. As the pure
 * synced.__init__, an object without send() or throw() raises AttributeError here. */
static int
stepper_init(PyObject *op, PyObject *args, PyObject *kwargs)
{
    StepperCore *self = (StepperCore *)op;
    static char *keywords[] = {"coroutine", NULL};
    PyObject *coroutine;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:synced", keywords, &coroutine)) {
        return -1;
    }
    if (self->module == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this stepper was cleared");
        return -1;
    }
    Py_XSETREF(self->coro, Py_NewRef(coroutine));
    if (PyCoro_CheckExact(coroutine) || PyGen_CheckExact(coroutine)) { /* both methods are there */
        Py_XSETREF(self->native, Py_NewRef(coroutine));
        Py_CLEAR(self->send);
        Py_CLEAR(self->throw_);
        return 0;
    }
    sync_state *state = get_state(self->module);
    PyObject *send = PyObject_GetAttr(coroutine, state->str_send);
    if (send == NULL) {
        return -1;
    }
    PyObject *throw_ = PyObject_GetAttr(coroutine, state->str_throw);
    if (throw_ == NULL) {
        Py_DECREF(send);
        return -1;
    }
    Py_CLEAR(self->native);
    Py_XSETREF(self->send, send);
    Py_XSETREF(self->throw_, throw_);
    return 0;
}

static int
stepper_traverse(PyObject *op, visitproc visit, void *arg)
{
    StepperCore *self = (StepperCore *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->module);
    Py_VISIT(self->coro);
    Py_VISIT(self->native);
    Py_VISIT(self->send);
    Py_VISIT(self->throw_);
    return 0;
}

static int
stepper_clear(PyObject *op)
{
    StepperCore *self = (StepperCore *)op;
    Py_CLEAR(self->coro);
    Py_CLEAR(self->native);
    Py_CLEAR(self->send);
    Py_CLEAR(self->throw_);
    Py_CLEAR(self->module);
    return 0;
}

static void
stepper_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    stepper_clear(op);
    type->tp_free(op);
    Py_DECREF(type);
}

static PyMethodDef stepper_methods[] = {
    {"send", stepper_send, METH_O, "sync(), then the coroutine's send(value)."},
    {"throw", (PyCFunction)(void (*)(void))stepper_throw, METH_FASTCALL, "sync(), then the coroutine's throw(...)."},
    {NULL},
};

static PyMemberDef stepper_members[] = {
    {"_coro", MEMBER_OBJECT_EX, offsetof(StepperCore, coro), 0, "the coroutine this steps, as given to __init__"},
    {NULL},
};

static PyType_Slot stepper_slots[] = {
    {Py_tp_doc, (void *)"The compiled steps of backends.asyncio's synced."},
    {Py_am_send, (void *)stepper_am_send},
    {Py_tp_iter, (void *)PyObject_SelfIter},
    {Py_tp_iternext, (void *)stepper_iternext},
    {Py_tp_new, (void *)stepper_new},
    {Py_tp_init, (void *)stepper_init},
    {Py_tp_traverse, (void *)stepper_traverse},
    {Py_tp_clear, (void *)stepper_clear},
    {Py_tp_dealloc, (void *)stepper_dealloc},
    {Py_tp_methods, (void *)stepper_methods},
    {Py_tp_members, (void *)stepper_members},
    {0, NULL},
};

static PyType_Spec stepper_spec = {
    .name = "backends.sync._speedups.StepperCore",
    .basicsize = sizeof(StepperCore),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = stepper_slots,
};

/* -- cuBLAS: the per-launch check -------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *module;  /* this module object, for its state (strong) */
    PyObject *seen;    /* cublas._seen: handle -> (frame, version, modes, allow_tf32, deterministic) */
    PyObject *mode_on; /* cublas._mode_on: handle -> the math mode known to be set on it */
    PyObject *slow;    /* the pure path's prepare(handle, kind) */
    vectorcallfunc vectorcall;
} FastPrepare;

static PyObject *
call_slow(FastPrepare *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *slow = Py_NewRef(self->slow);
    PyObject *result = PyObject_Vectorcall(slow, args, nargsf, kwnames);
    Py_DECREF(slow);
    return result;
}

static PyObject *
prepare_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    FastPrepare *self = (FastPrepare *)op;
    if (self->module == NULL || self->slow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this FastPrepare was cleared");
        return NULL;
    }
    PyObject *module = Py_NewRef(self->module);
    sync_state *state = get_state(module);
    PyObject *frame = NULL, *version = NULL, *seen = NULL, *on = NULL, *result = NULL;
    if (!configured(state)) {
        goto done;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1 || nargs > 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0)) {
        result = call_slow(self, args, nargsf, kwnames);
        goto done;
    }
    PyObject *handle = args[0];
    Py_ssize_t kind = 0; /* FP16 */
    if (nargs == 2) {
        kind = PyLong_AsSsize_t(args[1]); /* runs no Python: an int, or TypeError/OverflowError */
        if (kind == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            result = call_slow(self, args, nargsf, kwnames);
            goto done;
        }
    }
    /* As the pure prepare: this context's frame and the version first, then the handle's record
     * (its __hash__ can run Python; everything used after it is owned here). */
    if (PyContextVar_Get(state->overrides_var, state->no_scope, &frame) < 0 ||
        dict_get_ref(state->state_dict, state->str_version, &version) < 0 || version == NULL ||
        dict_get_ref(self->seen, handle, &seen) < 0) {
        goto fallback;
    }
    if (seen != NULL && PyTuple_CheckExact(seen) && PyTuple_GET_SIZE(seen) == 5 && PyTuple_GET_ITEM(seen, 0) == frame) {
        int differs = PyObject_RichCompareBool(PyTuple_GET_ITEM(seen, 1), version, Py_NE);
        PyObject *modes = PyTuple_GET_ITEM(seen, 2); /* alive while seen is owned */
        if (differs < 0) {
            goto fallback;
        }
        if (!differs && PyTuple_CheckExact(modes) && kind >= 0 && kind < PyTuple_GET_SIZE(modes)) {
            if (dict_get_ref(self->mode_on, handle, &on) < 0) {
                goto fallback;
            }
            if (on != NULL) {
                differs = PyObject_RichCompareBool(on, PyTuple_GET_ITEM(modes, kind), Py_NE);
                if (differs < 0) {
                    goto fallback;
                }
                if (!differs) {
                    result = Py_NewRef(seen);
                    goto done;
                }
            }
        }
    }
fallback:
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) {
            goto done; /* KeyboardInterrupt and the like: raised here, not swallowed */
        }
        PyErr_Clear(); /* the pure path raises what there is to raise */
    }
    result = call_slow(self, args, nargsf, kwnames);
done:
    Py_XDECREF(on);
    Py_XDECREF(seen);
    Py_XDECREF(version);
    Py_XDECREF(frame);
    Py_DECREF(module);
    return result;
}

static PyObject *
prepare_getattro(PyObject *op, PyObject *name)
{
    FastPrepare *self = (FastPrepare *)op;
    if (self->slow == NULL) {
        return PyObject_GenericGetAttr(op, name);
    }
    PyObject *slow = Py_NewRef(self->slow);
    PyObject *result = PyObject_GetAttr(slow, name); /* __doc__, __name__, ... */
    Py_DECREF(slow);
    return result;
}

static int
prepare_traverse(PyObject *op, visitproc visit, void *arg)
{
    FastPrepare *self = (FastPrepare *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->module);
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
    Py_CLEAR(self->module);
    return 0;
}

static void
prepare_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    prepare_clear(op);
    type->tp_free(op);
    Py_DECREF(type);
}

static PyMemberDef prepare_members[] = {
    {"__vectorcalloffset__", MEMBER_SSIZE_T, offsetof(FastPrepare, vectorcall), MEMBER_READONLY},
    {NULL},
};

static PyType_Slot prepare_slots[] = {
    {Py_tp_call, (void *)PyVectorcall_Call},
    {Py_tp_getattro, (void *)prepare_getattro},
    {Py_tp_traverse, (void *)prepare_traverse},
    {Py_tp_clear, (void *)prepare_clear},
    {Py_tp_dealloc, (void *)prepare_dealloc},
    {Py_tp_members, (void *)prepare_members},
    {0, NULL},
};

static PyType_Spec prepare_spec = {
    .name = "backends.sync._speedups.FastPrepare",
    .basicsize = sizeof(FastPrepare),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = prepare_slots,
};

static PyObject *
fast_prepare(PyObject *module, PyObject *args)
{
    PyObject *seen, *mode_on, *slow;
    if (!PyArg_ParseTuple(args, "O!O!O:fast_prepare", &PyDict_Type, &seen, &PyDict_Type, &mode_on, &slow)) {
        return NULL;
    }
    PyTypeObject *type = get_state(module)->prepare_type;
    FastPrepare *self = (FastPrepare *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->module = Py_NewRef(module);
    self->seen = Py_NewRef(seen);
    self->mode_on = Py_NewRef(mode_on);
    self->slow = Py_NewRef(slow);
    self->vectorcall = prepare_vectorcall;
    return (PyObject *)self;
}

/* -- cuBLAS: the wrapped routines ---------------------------------------------------------- */

/* A wrapped cuBLAS routine: cublas._wrap's wrapper, whose work is done here for the calls CuPy
 * makes (positional arguments; a handle, an Atype and a computeType that are ints). Every other
 * call (keywords, a handle of another type, too few arguments) goes to that pure wrapper, the
 * reference, whole: the fast path decides before it does anything, from the arguments alone,
 * so no call is ever done half here and half there. What the fast path does, in the reference's
 * order: prepare(handle, kind) (the FastPrepare above, in C); the stream the launch goes to;
 * for a GEMM on a float type in an algorithms.deterministic scope, check_streams() (in C where
 * the handle has been used from this stream only, else Python);
 * note_stream() (in C when the handle's entry already says so, else Python); a float32 GEMM's
 * compute type swapped between 32F and 32F_FAST_TF32 (in a copy of the argument vector: no
 * tuple is built); then CuPy's routine.
 *
 * The stream: CuPy's routines set the handle's stream to cupy_backends.cuda.stream's
 * get_current_stream_ptr() first (cublas.pyx _setStream). That module exports the C function
 * itself (Cython's __pyx_capi__, a capsule named "intptr_t (void)"): called here, it is the exact
 * stream for the price of a C call (the pure wrapper calls the same function through ctypes, so
 * both raise what it raises, or, CuPy 14.0 and older, both get the null stream where it reports
 * its error as unraisable). Where CuPy exports no such function (the stand-in), the pure
 * cublas.current_stream. As current_stream does: the null stream's value where cupy.cuda.stream
 * is not imported, and cudaStreamLegacy counted as the null stream.
 *
 * Everything it reads is read from the cublas module's namespace once, when it is made (the
 * tables are the same dict objects for the module's life: install() clears them in place). */

/* The C function of cupy_backends.cuda.stream's __pyx_capi__ entry get_current_stream_ptr, by
 * the signature Cython names its capsule with (a capsule of another signature is not used). */
#define STREAM_PTR_SIGNATURE "intptr_t (void)"
typedef intptr_t (*stream_ptr_function)(void);

typedef struct {
    PyObject_HEAD
    PyObject *routine;   /* CuPy's function */
    PyObject *reference; /* cublas._wrap's wrapper of it: every call the fast path does not take */
    PyObject *prepare;   /* cublas.prepare: a FastPrepare of this module */
    PyObject *stream_of; /* cublas._stream_of: handle -> its one stream, or SEVERAL, or SOME_DEFAULT */
    PyObject *note;      /* cublas.note_stream(handle, stream) */
    PyObject *check;     /* cublas.check_streams(name, handle, stream) */
    PyObject *query;     /* cublas.current_stream(): where CuPy exports no stream function */
    PyObject *capi;      /* the capsule of get_current_stream_ptr, or NULL: keeps it alive */
    stream_ptr_function stream_ptr;
    PyObject *streams_name; /* "cupy.cuda.stream" */
    PyObject *name;         /* the routine's name, for check_streams */
    PyObject *bf16_kind;    /* cublas.BF16: prepare's kind for a bf16 GEMM */
    PyObject *compute_32f;  /* CUBLAS_COMPUTE_32F and CUBLAS_COMPUTE_32F_FAST_TF32 */
    PyObject *compute_tf32;
    PyObject *dict;     /* __dict__: functools.update_wrapper's __name__, __doc__, __wrapped__, ... */
    PyObject *weakrefs; /* weak references to it, as to a function */
    long long null_stream, legacy_stream, several, value_32f, value_tf32;
    uint64_t fp32_types, bf16_types, integer_types; /* sets of CUDA data types, as bits */
    Py_ssize_t type_at, compute_at;                 /* of Atype, of computeType; -1: none */
    int gemm;                                       /* a GEMM: the streams check and the compute type */
    vectorcallfunc vectorcall;
} CublasRoutine;

static int
has_type(uint64_t types, long value)
{
    return value >= 0 && value < 64 && (types >> value) & 1;
}

/* The int an exact int holds, *overflow set where it does not fit (then no value is equal). */
static long long
exact_int_value(PyObject *value, int *overflow)
{
    long long result = PyLong_AsLongLongAndOverflow(value, overflow); /* an exact int: no error */
    return *overflow ? 0 : result;
}

/* The stream a launch made now goes to, as cublas.current_stream() computes it: *value, and
 * *object (owned) where the value came from Python, else NULL. *exact: *value is the value
 * (0: the Python query returned something that is no exact int, then use *object). -1 with an
 * exception set. */
static int
launch_stream(CublasRoutine *self, long long *value, PyObject **object, int *exact)
{
    *object = NULL;
    *exact = 1;
    if (self->stream_ptr == NULL) {
        PyObject *query = Py_NewRef(self->query);
        PyObject *stream = PyObject_CallNoArgs(query);
        Py_DECREF(query);
        if (stream == NULL) {
            return -1;
        }
        int overflow = 0;
        *object = stream;
        *value = PyLong_CheckExact(stream) ? exact_int_value(stream, &overflow) : 0;
        *exact = PyLong_CheckExact(stream) && !overflow;
        return 0;
    }
    /* sys.modules.get("cupy.cuda.stream"): a str key, so the look-up runs no Python code */
    PyObject *streams = PyDict_GetItemWithError(PyImport_GetModuleDict(), self->streams_name);
    if (streams == NULL && PyErr_Occurred()) {
        return -1;
    }
    if (streams == NULL || streams == Py_None) {
        *value = self->null_stream;
    }
    else {
        intptr_t ptr = self->stream_ptr(); /* Cython's "except? -1" (CuPy 14): -1 and an exception */
        if (ptr == -1 && PyErr_Occurred()) {
            return -1;
        }
        *value = (long long)ptr;
    }
    if (*value == self->legacy_stream) {
        *value = 0;
    }
    return 0;
}

/* *object: the stream as an int object (made from value where it is NULL). -1 with an exception set. */
static int
stream_object(long long value, PyObject **object)
{
    if (*object == NULL && (*object = PyLong_FromLongLong(value)) == NULL) {
        return -1;
    }
    return 0;
}

/* cublas.note_stream(handle, stream): nothing to do where the handle's entry already is this
 * stream or SEVERAL (the steady state); else the reference does it. -1 with an exception set. */
static int
note_stream(CublasRoutine *self, PyObject *handle, long long value, PyObject **object, int exact)
{
    if (exact) {
        PyObject *used = NULL;
        if (dict_get_ref(self->stream_of, handle, &used) < 0) {
            return -1;
        }
        int overflow = 0, done = 0;
        if (used != NULL && PyLong_CheckExact(used)) {
            long long known = exact_int_value(used, &overflow);
            done = !overflow && (known == value || known == self->several);
        }
        Py_XDECREF(used);
        if (done) {
            return 0;
        }
        if (stream_object(value, object) < 0) {
            return -1;
        }
    }
    PyObject *note = Py_NewRef(self->note);
    PyObject *args[2] = {handle, *object};
    PyObject *result = PyObject_Vectorcall(note, args, 2, NULL);
    Py_DECREF(note);
    if (result == NULL) {
        return -1;
    }
    Py_DECREF(result);
    return 0;
}

/* Whether the handle's stream record is this stream or none (then check_streams passes without a
 * word: the handle has been used from no other stream): 1; 0 where check_streams must decide (it
 * reads the record again); -1 with an exception set. */
static int
only_this_stream(CublasRoutine *self, PyObject *handle, long long value, int exact)
{
    if (!exact) {
        return 0;
    }
    PyObject *used = NULL;
    if (dict_get_ref(self->stream_of, handle, &used) < 0) {
        return -1;
    }
    int overflow = 0, only = used == NULL;
    if (used != NULL && PyLong_CheckExact(used)) {
        long long known = exact_int_value(used, &overflow);
        only = !overflow && known == value;
    }
    Py_XDECREF(used);
    return only;
}

/* cublas.check_streams(name, handle, stream): refuses (raises) or warns. -1 with an exception set. */
static int
check_streams(CublasRoutine *self, PyObject *handle, long long value, PyObject **object)
{
    if (stream_object(value, object) < 0) {
        return -1;
    }
    PyObject *check = Py_NewRef(self->check);
    PyObject *args[3] = {self->name, handle, *object};
    PyObject *checked = PyObject_Vectorcall(check, args, 3, NULL);
    Py_DECREF(check);
    if (checked == NULL) {
        return -1;
    }
    Py_DECREF(checked);
    return 0;
}

/* seen[index], as the reference's seen[3] reads it (owned). */
static PyObject *
seen_item(PyObject *seen, Py_ssize_t index)
{
    if (PyTuple_CheckExact(seen) && index < PyTuple_GET_SIZE(seen)) {
        return Py_NewRef(PyTuple_GET_ITEM(seen, index));
    }
    PyObject *key = PyLong_FromSsize_t(index);
    if (key == NULL) {
        return NULL;
    }
    PyObject *item = PyObject_GetItem(seen, key);
    Py_DECREF(key);
    return item;
}

/* Whether the fast path takes this call (decided from the arguments alone, running no Python
 * code); *atype: the GEMM's input type, -1 where it has none. */
static int
takes_fast_path(CublasRoutine *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, long *atype)
{
    *atype = -1;
    if ((kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) || nargs < 1 || !PyLong_CheckExact(args[0])) {
        return 0;
    }
    if (!self->gemm) {
        return 1;
    }
    if (self->type_at >= 0) {
        if (nargs <= self->type_at || !PyLong_CheckExact(args[self->type_at])) {
            return 0;
        }
        int overflow = 0;
        long value = PyLong_AsLongAndOverflow(args[self->type_at], &overflow);
        if (overflow) {
            return 0;
        }
        *atype = value;
    }
    return self->compute_at < 0 || nargs <= self->compute_at || PyLong_CheckExact(args[self->compute_at]);
}

/* The GEMM's steps between prepare() and CuPy's call: the streams check, note_stream, and the
 * compute type to pass (*wanted: owned, or NULL to pass the arguments as they are). */
static int
gemm_steps(CublasRoutine *self, PyObject *const *args, Py_ssize_t nargs, long atype, PyObject *seen,
           PyObject **wanted)
{
    PyObject *handle = args[0];
    PyObject *allow_tf32 = NULL, *deterministic = NULL, *stream = NULL;
    long long value = 0;
    int exact = 1, status = -1;
    *wanted = NULL;
    if ((allow_tf32 = seen_item(seen, 3)) == NULL || launch_stream(self, &value, &stream, &exact) < 0 ||
        (deterministic = seen_item(seen, 4)) == NULL) {
        goto done;
    }
    int check = PyObject_IsTrue(deterministic);
    if (check < 0) {
        goto done;
    }
    if (check && !has_type(self->integer_types, atype)) { /* (no Atype: not an integer GEMM) */
        int only = only_this_stream(self, handle, value, exact);
        if (only < 0 || (!only && check_streams(self, handle, value, &stream) < 0)) {
            goto done;
        }
    }
    if (note_stream(self, handle, value, &stream, exact) < 0) {
        goto done;
    }
    if (self->compute_at >= 0 && has_type(self->fp32_types, atype)) {
        int tf32 = PyObject_IsTrue(allow_tf32);
        if (tf32 < 0) {
            goto done;
        }
        if (nargs <= self->compute_at) { /* (no computeType: CuPy raises its TypeError) */
            status = 0;
            goto done;
        }
        int overflow = 0;
        long long asked = exact_int_value(args[self->compute_at], &overflow);
        long long target = tf32 ? self->value_tf32 : self->value_32f;
        if (!overflow && (asked == self->value_32f || asked == self->value_tf32) && asked != target) {
            *wanted = Py_NewRef(tf32 ? self->compute_tf32 : self->compute_32f);
        }
    }
    status = 0;
done:
    Py_XDECREF(allow_tf32);
    Py_XDECREF(deterministic);
    Py_XDECREF(stream);
    return status;
}

/* CuPy's routine with args, the one at compute_at replaced by wanted: a copy of the vector. */
static PyObject *
call_with_compute_type(PyObject *routine, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t at, PyObject *wanted)
{
    PyObject *small[33], **buffer = small;
    if (nargs + 1 > (Py_ssize_t)(sizeof(small) / sizeof(small[0]))) {
        buffer = PyMem_New(PyObject *, nargs + 1);
        if (buffer == NULL) {
            return PyErr_NoMemory();
        }
    }
    buffer[0] = NULL; /* the slot PY_VECTORCALL_ARGUMENTS_OFFSET lends the callee */
    memcpy(buffer + 1, args, (size_t)nargs * sizeof(PyObject *));
    buffer[1 + at] = wanted;
    PyObject *result = PyObject_Vectorcall(routine, buffer + 1, (size_t)nargs | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (buffer != small) {
        PyMem_Free(buffer);
    }
    return result;
}

static PyObject *
routine_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    CublasRoutine *self = (CublasRoutine *)op;
    if (self->reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this cuBLAS routine wrapper was cleared");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    long atype;
    if (!takes_fast_path(self, args, nargs, kwnames, &atype)) {
        PyObject *reference = Py_NewRef(self->reference);
        PyObject *result = PyObject_Vectorcall(reference, args, nargsf, kwnames);
        Py_DECREF(reference);
        return result;
    }
    /* The arguments are the caller's and self is the caller's, alive for the whole call (and its
     * fields are set once: nothing rebinds them); what this calls is owned here all the same. */
    PyObject *routine = Py_NewRef(self->routine), *prepare = Py_NewRef(self->prepare);
    PyObject *seen = NULL, *wanted = NULL, *result = NULL;
    PyObject *prepare_args[2] = {args[0], self->bf16_kind};
    int bf16 = has_type(self->bf16_types, atype);
    seen = prepare_vectorcall(prepare, prepare_args, bf16 ? 2 : 1, NULL);
    if (seen == NULL) {
        goto done;
    }
    if (self->gemm) {
        if (gemm_steps(self, args, nargs, atype, seen, &wanted) < 0) {
            goto done;
        }
    }
    else {
        long long value = 0;
        PyObject *stream = NULL;
        int exact = 1;
        int failed = launch_stream(self, &value, &stream, &exact) < 0 ||
                     note_stream(self, args[0], value, &stream, exact) < 0;
        Py_XDECREF(stream);
        if (failed) {
            goto done;
        }
    }
    result = wanted == NULL ? PyObject_Vectorcall(routine, args, nargsf, NULL)
                            : call_with_compute_type(routine, args, nargs, self->compute_at, wanted);
done:
    Py_XDECREF(wanted);
    Py_XDECREF(seen);
    Py_DECREF(prepare);
    Py_DECREF(routine);
    return result;
}

static PyObject *
routine_repr(PyObject *op)
{
    CublasRoutine *self = (CublasRoutine *)op;
    if (self->name == NULL) {
        return PyUnicode_FromString("<cuBLAS routine (cleared), wrapped by backends>");
    }
    return PyUnicode_FromFormat("<cuBLAS routine %U, wrapped by backends>", self->name);
}

static PyObject *
routine_reduce(PyObject *op, PyObject *unused)
{
    /* pickled by name, as the function it stands for: pickle finds it in its __module__ */
    return PyObject_GetAttrString(op, "__qualname__");
}

static int
routine_traverse(PyObject *op, visitproc visit, void *arg)
{
    CublasRoutine *self = (CublasRoutine *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->routine);
    Py_VISIT(self->reference);
    Py_VISIT(self->prepare);
    Py_VISIT(self->stream_of);
    Py_VISIT(self->note);
    Py_VISIT(self->check);
    Py_VISIT(self->query);
    Py_VISIT(self->capi);
    Py_VISIT(self->streams_name);
    Py_VISIT(self->name);
    Py_VISIT(self->bf16_kind);
    Py_VISIT(self->compute_32f);
    Py_VISIT(self->compute_tf32);
    Py_VISIT(self->dict);
    return 0;
}

static int
routine_clear(PyObject *op)
{
    CublasRoutine *self = (CublasRoutine *)op;
    self->stream_ptr = NULL;
    Py_CLEAR(self->reference); /* first: a cleared wrapper says so */
    Py_CLEAR(self->routine);
    Py_CLEAR(self->prepare);
    Py_CLEAR(self->stream_of);
    Py_CLEAR(self->note);
    Py_CLEAR(self->check);
    Py_CLEAR(self->query);
    Py_CLEAR(self->capi);
    Py_CLEAR(self->streams_name);
    Py_CLEAR(self->name);
    Py_CLEAR(self->bf16_kind);
    Py_CLEAR(self->compute_32f);
    Py_CLEAR(self->compute_tf32);
    Py_CLEAR(self->dict);
    return 0;
}

static void
routine_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    if (((CublasRoutine *)op)->weakrefs != NULL) {
        PyObject_ClearWeakRefs(op);
    }
    routine_clear(op);
    type->tp_free(op);
    Py_DECREF(type);
}

static PyMethodDef routine_methods[] = {
    {"__reduce__", routine_reduce, METH_NOARGS, "Pickled by name, as CuPy's function is."},
    {NULL},
};

static PyMemberDef routine_members[] = {
    {"__vectorcalloffset__", MEMBER_SSIZE_T, offsetof(CublasRoutine, vectorcall), MEMBER_READONLY},
    {"__dictoffset__", MEMBER_SSIZE_T, offsetof(CublasRoutine, dict), MEMBER_READONLY},
    {"__weaklistoffset__", MEMBER_SSIZE_T, offsetof(CublasRoutine, weakrefs), MEMBER_READONLY},
    {NULL},
};

static PyGetSetDef routine_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyType_Slot routine_slots[] = {
    {Py_tp_doc, (void *)"A cuBLAS routine of CuPy's, wrapped by the sync layer (see backends.sync.cublas)."},
    {Py_tp_call, (void *)PyVectorcall_Call},
    {Py_tp_repr, (void *)routine_repr},
    {Py_tp_traverse, (void *)routine_traverse},
    {Py_tp_clear, (void *)routine_clear},
    {Py_tp_dealloc, (void *)routine_dealloc},
    {Py_tp_methods, (void *)routine_methods},
    {Py_tp_members, (void *)routine_members},
    {Py_tp_getset, (void *)routine_getset},
    {0, NULL},
};

static PyType_Spec routine_spec = {
    .name = "backends.sync._speedups.CublasRoutine",
    .basicsize = sizeof(CublasRoutine),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = routine_slots,
};

/* namespace[key] (owned), or NULL with an exception that names what is missing. */
static PyObject *
namespace_item(PyObject *namespace, const char *key)
{
    PyObject *item = PyDict_GetItemString(namespace, key); /* borrowed, owned at once */
    if (item == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_KeyError, "the cuBLAS target's namespace has no %s", key);
        }
        return NULL;
    }
    return Py_NewRef(item);
}

static int
namespace_int(PyObject *namespace, const char *key, long long *value)
{
    PyObject *item = namespace_item(namespace, key);
    if (item == NULL) {
        return -1;
    }
    *value = PyLong_AsLongLong(item);
    Py_DECREF(item);
    return *value == -1 && PyErr_Occurred() ? -1 : 0;
}

/* A set of CUDA data types (ints 0 to 63) as bits. */
static int
namespace_types(PyObject *namespace, const char *key, uint64_t *types)
{
    PyObject *item = namespace_item(namespace, key), *iterator = NULL, *element;
    *types = 0;
    if (item == NULL || (iterator = PyObject_GetIter(item)) == NULL) {
        Py_XDECREF(item);
        return -1;
    }
    while ((element = PyIter_Next(iterator)) != NULL) {
        long value = PyLong_CheckExact(element) ? PyLong_AsLong(element) : -1;
        Py_DECREF(element);
        if (value < 0 || value >= 64) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_ValueError, "%s: a CUDA data type is an int from 0 to 63", key);
            }
            break;
        }
        *types |= (uint64_t)1 << value;
    }
    Py_DECREF(iterator);
    Py_DECREF(item);
    return PyErr_Occurred() ? -1 : 0;
}

static int
optional_index(PyObject *value, Py_ssize_t *index)
{
    if (value == Py_None) {
        *index = -1;
        return 0;
    }
    *index = PyLong_AsSsize_t(value);
    if (*index == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (*index < 1) {
        PyErr_SetString(PyExc_ValueError, "an argument index after the handle's (1 or more), or None");
        return -1;
    }
    return 0;
}

static PyObject *
fast_routine(PyObject *module, PyObject *args)
{
    PyObject *namespace, *routine, *reference, *name, *type_at, *compute_at;
    if (!PyArg_ParseTuple(args, "O!OOUOO:fast_routine", &PyDict_Type, &namespace, &routine, &reference, &name,
                          &type_at, &compute_at)) {
        return NULL;
    }
    sync_state *state = get_state(module);
    PyTypeObject *type = state->routine_type;
    CublasRoutine *self = (CublasRoutine *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->routine = Py_NewRef(routine);
    self->name = Py_NewRef(name);
    self->streams_name = Py_NewRef(state->str_streams);
    int gemm = PyUnicode_Find(name, state->str_gemm, 0, PY_SSIZE_T_MAX, 1);
    if (gemm == -2 || optional_index(type_at, &self->type_at) < 0 ||
        optional_index(compute_at, &self->compute_at) < 0) {
        goto error;
    }
    self->gemm = gemm >= 0;
    if ((self->prepare = namespace_item(namespace, "prepare")) == NULL ||
        (self->stream_of = namespace_item(namespace, "_stream_of")) == NULL ||
        (self->note = namespace_item(namespace, "note_stream")) == NULL ||
        (self->check = namespace_item(namespace, "check_streams")) == NULL ||
        (self->query = namespace_item(namespace, "current_stream")) == NULL ||
        (self->capi = namespace_item(namespace, "_stream_ptr_capi")) == NULL ||
        (self->bf16_kind = namespace_item(namespace, "BF16")) == NULL ||
        (self->compute_32f = namespace_item(namespace, "COMPUTE_32F")) == NULL ||
        (self->compute_tf32 = namespace_item(namespace, "COMPUTE_32F_FAST_TF32")) == NULL ||
        namespace_int(namespace, "_null_stream", &self->null_stream) < 0 ||
        namespace_int(namespace, "LEGACY_STREAM", &self->legacy_stream) < 0 ||
        namespace_int(namespace, "SEVERAL", &self->several) < 0 ||
        namespace_int(namespace, "COMPUTE_32F", &self->value_32f) < 0 ||
        namespace_int(namespace, "COMPUTE_32F_FAST_TF32", &self->value_tf32) < 0 ||
        namespace_types(namespace, "_FP32_TYPES", &self->fp32_types) < 0 ||
        namespace_types(namespace, "_BF16_TYPES", &self->bf16_types) < 0 ||
        namespace_types(namespace, "_INTEGER_TYPES", &self->integer_types) < 0) {
        goto error;
    }
    if (!Py_IS_TYPE(self->prepare, state->prepare_type) || !PyDict_CheckExact(self->stream_of)) {
        PyErr_SetString(PyExc_TypeError, "fast_routine: cublas.prepare is no FastPrepare of this module, or "
                                         "cublas._stream_of no dict");
        goto error;
    }
    if (PyCapsule_IsValid(self->capi, STREAM_PTR_SIGNATURE)) {
        self->stream_ptr = (stream_ptr_function)PyCapsule_GetPointer(self->capi, STREAM_PTR_SIGNATURE);
    }
    self->reference = Py_NewRef(reference); /* last: the wrapper is whole */
    self->vectorcall = routine_vectorcall;
    return (PyObject *)self;
error:
    Py_DECREF(self);
    return NULL;
}

/* -- module ------------------------------------------------------------------------------ */

static PyObject *
configure(PyObject *module, PyObject *args)
{
    PyObject *var, *empty, *state_dict, *sync_dict, *push, *engine = Py_None;
    /* the frames are compared by identity only: NO_SCOPE is whatever the engine's is */
    if (!PyArg_ParseTuple(args, "O!OO!O!O|O:configure", &PyContextVar_Type, &var, &empty, &PyDict_Type, &state_dict,
                          &PyDict_Type, &sync_dict, &push, &engine)) {
        return NULL;
    }
    void *mirror_sync = NULL; /* no engine given (a test of this module alone): no mirror to sync */
    if (engine != Py_None) {
        PyObject *capsule = PyObject_GetAttrString(engine, "_mirror_sync");
        mirror_sync = capsule == NULL ? NULL : PyCapsule_GetPointer(capsule, "backends._engine._speedups._mirror_sync");
        Py_XDECREF(capsule);
        if (mirror_sync == NULL) {
            return NULL;
        }
    }
    sync_state *state = get_state(module);
    Py_XSETREF(state->engine, Py_NewRef(engine));
    state->mirror_sync = (int (*)(PyObject *))mirror_sync;
    Py_XSETREF(state->overrides_var, Py_NewRef(var));
    Py_XSETREF(state->no_scope, Py_NewRef(empty));
    Py_XSETREF(state->state_dict, Py_NewRef(state_dict));
    Py_XSETREF(state->sync_dict, Py_NewRef(sync_dict));
    Py_XSETREF(state->push, Py_NewRef(push));
    Py_RETURN_NONE;
}

static PyObject *
configure_stepper(PyObject *module, PyObject *args)
{
    PyObject *globals, *sync;
    if (!PyArg_ParseTuple(args, "O!O:configure_stepper", &PyDict_Type, &globals, &sync)) {
        return NULL;
    }
    sync_state *state = get_state(module);
    Py_XSETREF(state->stepper_globals, Py_NewRef(globals));
    Py_XSETREF(state->default_sync, Py_NewRef(sync));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure_stepper", configure_stepper, METH_VARARGS,
     "configure_stepper(vars(backends.integrations.asyncio), backends.sync.sync): where a step finds sync."},
    {"configure", configure, METH_VARARGS,
     "configure(overrides, NO_SCOPE, vars(state), vars(backends.sync), _push[, the engine's _speedups]): what "
     "sync() reads and calls (with the engine, its mirror too)."},
    {"sync", fast_sync, METH_NOARGS, "backends.sync.sync(), answering 'nothing changed' in C."},
    {"forget", forget, METH_NOARGS, "backends.sync.invalidate(): drop this thread's record of its last push."},
    {"last_push", last_push, METH_NOARGS,
     "This thread's record of its last push, (frame, version, device), or None (for tests)."},
    {"fast_prepare", fast_prepare, METH_VARARGS,
     "fast_prepare(cublas._seen, cublas._mode_on, cublas._prepare): cuBLAS's per-launch check, "
     "answering 'nothing changed' in C."},
    {"fast_routine", fast_routine, METH_VARARGS,
     "fast_routine(vars(cublas), routine, reference, name, type_at, compute_at): a wrapped cuBLAS routine "
     "(cublas._wrap's reference wrapper, done in C for the calls CuPy makes)."},
    {NULL},
};

static int
speedups_exec(PyObject *module)
{
    if (PyModule_AddIntConstant(module, "INTERFACE", BACKENDS_INTERFACE) < 0) {
        return -1;
    }
    sync_state *state = get_state(module);
    if ((state->str_sync = PyUnicode_InternFromString("sync")) == NULL ||
        (state->str_send = PyUnicode_InternFromString("send")) == NULL ||
        (state->str_throw = PyUnicode_InternFromString("throw")) == NULL ||
        (state->str_version = PyUnicode_InternFromString("version")) == NULL ||
        (state->str_query = PyUnicode_InternFromString("_device_query")) == NULL ||
        (state->str_streams = PyUnicode_InternFromString("cupy.cuda.stream")) == NULL ||
        (state->str_gemm = PyUnicode_InternFromString("gemm")) == NULL ||
        (state->record_key = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type)) == NULL) {
        return -1;
    }
    state->stepper_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &stepper_spec, NULL);
    if (state->stepper_type == NULL || PyModule_AddObjectRef(module, "StepperCore", (PyObject *)state->stepper_type) < 0) {
        return -1;
    }
    state->prepare_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &prepare_spec, NULL);
    if (state->prepare_type == NULL || PyModule_AddObjectRef(module, "FastPrepare", (PyObject *)state->prepare_type) < 0) {
        return -1;
    }
    state->routine_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &routine_spec, NULL);
    if (state->routine_type == NULL ||
        PyModule_AddObjectRef(module, "CublasRoutine", (PyObject *)state->routine_type) < 0) {
        return -1;
    }
    return 0;
}

static int
speedups_traverse(PyObject *module, visitproc visit, void *arg)
{
    sync_state *state = get_state(module);
    if (state == NULL) {
        return 0;
    }
    Py_VISIT(state->overrides_var);
    Py_VISIT(state->no_scope);
    Py_VISIT(state->state_dict);
    Py_VISIT(state->sync_dict);
    Py_VISIT(state->push);
    Py_VISIT(state->engine);
    Py_VISIT(state->stepper_globals);
    Py_VISIT(state->default_sync);
    Py_VISIT(state->str_sync);
    Py_VISIT(state->str_send);
    Py_VISIT(state->str_throw);
    Py_VISIT(state->str_version);
    Py_VISIT(state->str_query);
    Py_VISIT(state->str_streams);
    Py_VISIT(state->str_gemm);
    Py_VISIT(state->record_key);
    Py_VISIT(state->stepper_type);
    Py_VISIT(state->prepare_type);
    Py_VISIT(state->routine_type);
    return 0;
}

static int
speedups_clear(PyObject *module)
{
    sync_state *state = get_state(module);
    if (state == NULL) {
        return 0;
    }
    Py_CLEAR(state->overrides_var);
    Py_CLEAR(state->no_scope);
    Py_CLEAR(state->state_dict);
    Py_CLEAR(state->sync_dict);
    Py_CLEAR(state->push);
    Py_CLEAR(state->engine);
    state->mirror_sync = NULL;
    Py_CLEAR(state->stepper_globals);
    Py_CLEAR(state->default_sync);
    Py_CLEAR(state->str_sync);
    Py_CLEAR(state->str_send);
    Py_CLEAR(state->str_throw);
    Py_CLEAR(state->str_version);
    Py_CLEAR(state->str_query);
    Py_CLEAR(state->str_streams);
    Py_CLEAR(state->str_gemm);
    Py_CLEAR(state->record_key);
    Py_CLEAR(state->stepper_type);
    Py_CLEAR(state->prepare_type);
    Py_CLEAR(state->routine_type);
    return 0;
}

static void
speedups_free(void *module)
{
    speedups_clear((PyObject *)module);
}

static PyModuleDef_Slot speedups_slots[] = {
    {Py_mod_exec, (void *)speedups_exec},
#ifdef Py_mod_multiple_interpreters
    /* true: nothing is shared between module objects (no C static holds a Python object) */
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef speedups_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "backends.sync._speedups",
    .m_doc = "The compiled path of the sync layer's checks when nothing changed (see the C source).",
    .m_size = sizeof(sync_state),
    .m_methods = module_methods,
    .m_slots = speedups_slots,
    .m_traverse = speedups_traverse,
    .m_clear = speedups_clear,
    .m_free = speedups_free,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&speedups_def);
}
