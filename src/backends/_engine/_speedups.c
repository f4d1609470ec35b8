/* The compiled path of the engine's hot operations: reading a flag and entering and exiting a
 * scope. The pure-Python engine (state.py, scope.py, namespace.py) is the reference and defines
 * every behaviour; this file only does, faster, the common case of each:
 *
 *   flag_descriptor()       a flag attribute: __get__ reads the current frame's override in its
 *                           slot, else the process default (namespace.py's property getter, line
 *                           for line);
 *   ScopeCore.__enter__     publish the frame (values, scope, token) (state.py, scope.py): the
 *                           scope's own values over no scope, else its last merge over the same
 *                           values below, else a new merge (kept as the last);
 *   ScopeCore.__exit__      reset the token when this scope is the innermost entry; anything
 *                           else (an out-of-order exit, another context, an exception walking
 *                           the chain) is handed to the pure-Python Scope._exit_slow;
 *   ScopeCore.__aenter__/__aexit__
 *                           awaitables whose one step is that entry or exit, in C;
 *   fast_flags()            a namespace's flags(one_bool_keyword=True): the scope made at
 *                           import; any other call is the pure path's flags() itself;
 *   mirror_notify()         mirror.py's Mirror.notify: "nothing changed" for a library's settings
 *                           that follow the flags (torch), and the push of what changed while the
 *                           thread that checked last is the only one holding values; everything
 *                           else is the pure Mirror.arbitrate. Scope entry (before publishing)
 *                           and exit (after resetting) call it where a mirror is configured.
 *   DecoratedCore.call      a call of a function decorated with a scope (scope.py's
 *                           Decorated.call): enter, call, exit, in C; an exception's unwinding
 *                           and a result whose body runs later go to the pure path's helpers.
 *
 * Setting and deleting a flag attribute, and reading it on the class, go to the property the
 * pure path would use. No Python code runs between publishing a frame and recording its entry,
 * so no signal handler can see a half-entered scope (the pure path needs a try/except there).
 *
 * As CPython's own extension modules: multi-phase initialisation (PEP 489), everything in the
 * module's state (PEP 573/630) and heap types, so each interpreter, and each import of the
 * package after it was removed from sys.modules, has its own configuration. No reference
 * borrowed from a dict or tuple is kept across anything that can run Python code (a __hash__,
 * an __eq__, a finaliser run by a garbage collection during an allocation). Built for the GIL
 * build of CPython only (see setup.py): the free-threaded build uses the pure engine.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h> /* offsetof: Python.h no longer includes it in 3.13 */

/* The version of the interface between this file and the Python code that uses it, stored as the
 * module's INTERFACE: the Python code (src/backends/_engine/accelerator.py, INTERFACES) leaves a
 * module built for another one unused. Bump both with any change of what one expects of the other. */
#define BACKENDS_INTERFACE 3

#ifdef Py_GIL_DISABLED
#error "the accelerator relies on the GIL: a free-threaded CPython uses the pure-Python engine"
#endif

#if PY_VERSION_HEX >= 0x030C0000
#define OBJECT_MEMBER Py_T_OBJECT_EX
#define READONLY_MEMBER Py_READONLY
#define SSIZE_MEMBER Py_T_PYSSIZET
#else
#include <structmember.h>
#define OBJECT_MEMBER T_OBJECT_EX
#define READONLY_MEMBER READONLY
#define SSIZE_MEMBER T_PYSSIZET
#endif

typedef struct {
    /* set by configure(): the ContextVar of frames, its default (NO_SCOPE, the frame outside any
     * scope), EMPTY (the values of no override) and state.published, the one-item list whose
     * item, the process defaults, is replaced by every write: read there at each read */
    PyObject *overrides_var;
    PyObject *no_scope;
    PyObject *empty;
    PyObject *published;
    PyObject *str_exit_slow;
    PyObject *str_enter_slow;
    /* set by configure_calls(): scope.py's _unwind and follow */
    PyObject *unwind;
    PyObject *follow;
    PyTypeObject *flag_type;
    PyTypeObject *scope_type;
    PyTypeObject *fastflags_type;
    PyTypeObject *step_type;
    /* The mirror (mirror.py), set by mirror_configure(); mirror is NULL when there is none. The
     * lists are the Mirror's own (wanted, own), changed in place by both sides; holder, solo and
     * the seen pair are this side's copy of Mirror.settle()'s record, for the fast path. */
    PyObject *mirror;
    PyObject *m_arbitrate;
    PyObject *m_accessors; /* a tuple of (get, put, push) per followed flag */
    PyObject *m_wanted;
    PyObject *m_own;
    PyObject *m_unset;
    PyObject *m_default_source;
    PyObject *m_seen_values;
    PyObject *m_seen_defaults;
    Py_ssize_t *m_slots;
    Py_ssize_t m_count;
    unsigned long m_holder;
    int m_solo;
    /* The thread inside a push, or 0: pushes are serialised (mirror.py's _lock, for this engine),
     * a push from inside a push is not waited for. Changed only with the GIL held. */
    unsigned long m_busy;
    PyTypeObject *decorated_type;
} engine_state;

static struct PyModuleDef engine_module;

static engine_state *
module_state(PyObject *module)
{
    return (engine_state *)PyModule_GetState(module);
}

/* The state, or NULL with a RuntimeError when configure() has not run. */
static engine_state *
configured(engine_state *st)
{
    if (st == NULL) {
        return NULL;
    }
    if (st->overrides_var == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "backends._engine._speedups is not configured: it is used through `import backends`");
        return NULL;
    }
    return st;
}

/* -- flag reads ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *module;    /* the module whose state this reads */
    engine_state *state; /* that module's state, which lives as long as the module this holds */
    PyObject *name;      /* the dotted flag name */
    Py_ssize_t slot;     /* its index in a frame's values and in the published defaults */
    PyObject *property;  /* the pure path's property: class access, setting, deleting, __doc__ */
} FlagDescriptor;

/* A descriptor cleared by the garbage collector, which a finaliser can still reach. */
static PyObject *
cleared(void)
{
    PyErr_SetString(PyExc_RuntimeError, "this flag descriptor was cleared");
    return NULL;
}

/* The pure path's getter: for what this engine never makes (a frame or defaults set by hand). */
static PyObject *
reference_get(FlagDescriptor *self, PyObject *obj, PyObject *type)
{
    PyObject *property = Py_NewRef(self->property);
    PyObject *value = Py_TYPE(property)->tp_descr_get(property, obj, type);
    Py_DECREF(property);
    return value;
}

static PyObject *
flag_get(PyObject *op, PyObject *obj, PyObject *type)
{
    FlagDescriptor *self = (FlagDescriptor *)op;
    if (self->state == NULL) {
        return cleared();
    }
    if (obj == NULL || obj == Py_None) {
        return Py_NewRef(self->property);
    }
    engine_state *st = configured(self->state);
    if (st == NULL) {
        return NULL;
    }
    PyObject *frame;
    if (PyContextVar_Get(st->overrides_var, st->no_scope, &frame) < 0) {
        return NULL;
    }
    Py_ssize_t slot = self->slot;
    if (frame != st->no_scope) {
        PyObject *values = PyTuple_CheckExact(frame) && PyTuple_GET_SIZE(frame) == 3 ? PyTuple_GET_ITEM(frame, 0) : NULL;
        if (values == NULL || !PyTuple_CheckExact(values) || slot >= PyTuple_GET_SIZE(values)) {
            Py_DECREF(frame);
            return reference_get(self, obj, type); /* not a frame this engine made */
        }
        PyObject *value = PyTuple_GET_ITEM(values, slot);
        if (value != Py_None) { /* an override: owned before the frame is let go */
            Py_INCREF(value);
            Py_DECREF(frame);
            return value;
        }
    }
    Py_DECREF(frame);
    /* the process default: borrowed from the list and owned at once */
    PyObject *published = PyList_GET_SIZE(st->published) == 1 ? PyList_GET_ITEM(st->published, 0) : NULL;
    if (published != NULL && PyTuple_CheckExact(published) && slot < PyTuple_GET_SIZE(published)) {
        return Py_NewRef(PyTuple_GET_ITEM(published, slot));
    }
    return reference_get(self, obj, type); /* not what state.py publishes */
}

static int
flag_set(PyObject *op, PyObject *obj, PyObject *value)
{
    if (((FlagDescriptor *)op)->property == NULL) {
        cleared();
        return -1;
    }
    PyObject *property = Py_NewRef(((FlagDescriptor *)op)->property);
    int result = Py_TYPE(property)->tp_descr_set(property, obj, value); /* checked at creation */
    Py_DECREF(property);
    return result;
}

static int
flag_traverse(PyObject *op, visitproc visit, void *arg)
{
    FlagDescriptor *self = (FlagDescriptor *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->module);
    Py_VISIT(self->name);
    Py_VISIT(self->property);
    return 0;
}

static int
flag_clear(PyObject *op)
{
    FlagDescriptor *self = (FlagDescriptor *)op;
    self->state = NULL; /* the module's, released below */
    Py_CLEAR(self->module);
    Py_CLEAR(self->name);
    Py_CLEAR(self->property);
    return 0;
}

static void
dealloc_gc(PyObject *op, inquiry clear)
{
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    clear(op);
    type->tp_free(op);
    Py_DECREF(type); /* a heap type's instances hold a reference to it */
}

static void
flag_dealloc(PyObject *op)
{
    dealloc_gc(op, flag_clear);
}

static PyObject *
flag_doc(PyObject *op, void *closure)
{
    PyObject *property = ((FlagDescriptor *)op)->property;
    return property == NULL ? cleared() : PyObject_GetAttrString(property, "__doc__");
}

static PyMemberDef flag_members[] = {
    {"name", OBJECT_MEMBER, offsetof(FlagDescriptor, name), READONLY_MEMBER, "the dotted flag name"},
    {"slot", SSIZE_MEMBER, offsetof(FlagDescriptor, slot), READONLY_MEMBER, "the flag's slot (state.SLOT)"},
    {"property", OBJECT_MEMBER, offsetof(FlagDescriptor, property), READONLY_MEMBER, "the pure-Python property"},
    {NULL},
};

static PyGetSetDef flag_getset[] = {
    {"__doc__", flag_doc, NULL, NULL, NULL},
    {NULL},
};

static PyType_Slot flag_slots[] = {
    /* no Py_tp_doc: it would stand in the type's dict where the __doc__ getset must (the flag's) */
    {Py_tp_traverse, flag_traverse},
    {Py_tp_clear, flag_clear},
    {Py_tp_dealloc, flag_dealloc},
    {Py_tp_descr_get, flag_get},
    {Py_tp_descr_set, flag_set},
    {Py_tp_members, flag_members},
    {Py_tp_getset, flag_getset},
    {0, NULL},
};

static PyType_Spec flag_spec = {
    .name = "backends._engine._speedups.FlagDescriptor",
    .basicsize = sizeof(FlagDescriptor),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = flag_slots,
};

static PyObject *
flag_descriptor(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyUnicode_CheckExact(args[0]) || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "flag_descriptor(name, slot, property) takes a str, an int and a property");
        return NULL;
    }
    Py_ssize_t slot = PyLong_AsSsize_t(args[1]);
    if (slot < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "flag_descriptor(): a slot is >= 0");
        }
        return NULL;
    }
    if (Py_TYPE(args[2])->tp_descr_get == NULL || Py_TYPE(args[2])->tp_descr_set == NULL) {
        PyErr_SetString(PyExc_TypeError, "flag_descriptor() needs a data descriptor (a property)");
        return NULL;
    }
    engine_state *st = module_state(module);
    FlagDescriptor *self = PyObject_GC_New(FlagDescriptor, st->flag_type);
    if (self == NULL) {
        return NULL;
    }
    self->module = Py_NewRef(module);
    self->state = st;
    self->name = Py_NewRef(args[0]);
    self->slot = slot;
    self->property = Py_NewRef(args[2]);
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* -- scope entry and exit --------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *overrides; /* Scope._overrides: a dict of checked values, never changed once set */
    PyObject *alone;     /* Scope._alone: those as values (one item per slot, None where not set) */
    PyObject *memo;      /* Scope._memo: (values below, merged values), the last merge */
} ScopeCore;

/* The pure path's method `name` of `op`, called with args: every uncommon case. A ScopeCore
 * made by hand (not a Scope) has no pure path: refused. */
static PyObject *
call_slow(PyObject *name, PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (!PyObject_HasAttr((PyObject *)Py_TYPE(op), name)) {
        PyErr_SetString(PyExc_TypeError, "ScopeCore is the compiled base of backends.Scope: "
                                         "build scopes with backends.flags(...)");
        return NULL;
    }
    Py_ssize_t total = nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames));
    PyObject **call = PyMem_Malloc((size_t)(total + 1) * sizeof(PyObject *));
    if (call == NULL) {
        return PyErr_NoMemory();
    }
    call[0] = op;
    for (Py_ssize_t i = 0; i < total; i++) {
        call[1 + i] = args[i];
    }
    PyObject *result = PyObject_VectorcallMethod(name, call, (size_t)(1 + nargs), kwnames);
    PyMem_Free(call);
    return result;
}

/* The values of a scope whose own are `alone` entered where `below` is in force (two tuples of
 * one size, owned by the caller): alone's item where it is not None, else below's; alone itself
 * where it has every slot (state.merged). */
static PyObject *
merge(PyObject *below, PyObject *alone)
{
    Py_ssize_t size = PyTuple_GET_SIZE(alone), i;
    for (i = 0; i < size && PyTuple_GET_ITEM(alone, i) != Py_None; i++) {
    }
    if (i == size) {
        return Py_NewRef(alone);
    }
    PyObject *values = PyTuple_New(size);
    if (values == NULL) {
        return NULL;
    }
    for (i = 0; i < size; i++) {
        PyObject *mine = PyTuple_GET_ITEM(alone, i);
        PyTuple_SET_ITEM(values, i, Py_NewRef(mine != Py_None ? mine : PyTuple_GET_ITEM(below, i)));
    }
    return values;
}

/* The values this scope publishes over `below` (a tuple of alone's size, owned by the caller), in
 * *values: alone over no scope, else the last merge when it was over these same values, else a
 * new one, kept as the last (scope.py's __enter__). Returns 0, -1 on an error, or 1 where _memo
 * is not what Scope keeps there (missing, or set by hand): the pure path says what happens. */
static int
values_over(engine_state *st, ScopeCore *self, PyObject *below, PyObject *alone, PyObject **values)
{
    *values = NULL;
    if (below == st->empty) {
        *values = Py_NewRef(alone);
        return 0;
    }
    PyObject *memo = self->memo; /* borrowed: nothing runs before the values are owned */
    if (memo == NULL || !PyTuple_CheckExact(memo) || PyTuple_GET_SIZE(memo) != 2) {
        return 1;
    }
    if (PyTuple_GET_ITEM(memo, 0) == below) {
        PyObject *last = PyTuple_GET_ITEM(memo, 1);
        if (!PyTuple_CheckExact(last) || PyTuple_GET_SIZE(last) != PyTuple_GET_SIZE(alone)) {
            return 1;
        }
        *values = Py_NewRef(last);
        return 0;
    }
    PyObject *merged = merge(below, alone);
    PyObject *pair = merged == NULL ? NULL : PyTuple_Pack(2, below, merged);
    if (pair == NULL) {
        Py_XDECREF(merged);
        return -1;
    }
    Py_XSETREF(self->memo, pair); /* (the old one's release may run Python: merged is owned) */
    *values = merged;
    return 0;
}

/* CPython gh-148891, on 3.11: PyContextVar_Set and _Reset build the context's new mapping from
 * its old one, which only the context holds, and an allocation on the way can run the garbage
 * collector, whose finalisers (a __del__ that enters a scope) may set a variable of the same
 * context: that replaces and frees the mapping being read (a crash, or a mapping without the
 * frame). Around each change of the frame, hold() keeps the collector off, so no finaliser runs
 * inside it, and holds a copy of the context, so the old mapping is released only in release(),
 * with the collector back on (a value only it held may have a finaliser). No Python code runs in
 * between, so no other thread can see the collector off. Nothing on 3.12+, which collects only
 * between bytecodes. */
typedef struct {
    PyObject *pinned;
    int collector_was_on;
} Held;

static void
release(Held *held)
{
    if (held->collector_was_on) {
        PyGC_Enable();
    }
    Py_XDECREF(held->pinned);
}

static int
hold(Held *held)
{
#if PY_VERSION_HEX < 0x030C0000
    held->collector_was_on = PyGC_Disable(); /* first: the copy itself may allocate */
    held->pinned = PyContext_CopyCurrent();
    if (held->pinned == NULL) {
        release(held);
        return -1;
    }
#else
    held->pinned = NULL;
    held->collector_was_on = 0;
#endif
    return 0;
}

/* PyContextVar_Reset of the engine's variable, inside hold()/release(): 0, or -1 with an exception. */
static int
reset_held(engine_state *st, PyObject *token)
{
    Held held;
    if (hold(&held) < 0) {
        return -1;
    }
    int result = PyContextVar_Reset(st->overrides_var, token);
    release(&held);
    return result;
}

/* -- the mirror: a library's settings following the flags (mirror.py) ------------------------ */

/* The per-flag "want" of mirror.py's Mirror.wants, borrowed from values or defaults: the override,
 * else the process default where its source is not "default", else UNSET. */
static PyObject *
mirror_want(engine_state *st, PyObject *values, PyObject *defaults, PyObject *sources, Py_ssize_t slot)
{
    PyObject *want = PyTuple_GET_ITEM(values, slot);
    if (want != Py_None) {
        return want;
    }
    PyObject *source = PyTuple_GET_ITEM(sources, slot);
    int is_default = source == st->m_default_source ||
                     (PyUnicode_CheckExact(source) && PyUnicode_Compare(source, st->m_default_source) == 0);
    return is_default ? st->m_unset : PyTuple_GET_ITEM(defaults, slot);
}

/* The published defaults, owned, when they are what state.py publishes for values of size n. */
static PyObject *
mirror_defaults(engine_state *st, Py_ssize_t n)
{
    PyObject *defaults = PyList_GET_SIZE(st->published) == 1 ? PyList_GET_ITEM(st->published, 0) : NULL;
    if (defaults == NULL || !PyTuple_CheckExact(defaults) || PyTuple_GET_SIZE(defaults) != n + 1) {
        return NULL;
    }
    PyObject *sources = PyTuple_GET_ITEM(defaults, n);
    if (!PyTuple_CheckExact(sources) || PyTuple_GET_SIZE(sources) != n) {
        return NULL;
    }
    return Py_NewRef(defaults);
}

static void
mirror_seen(engine_state *st, unsigned long holder, int solo, PyObject *values, PyObject *defaults)
{
    st->m_holder = holder;
    st->m_solo = solo;
    Py_XSETREF(st->m_seen_values, Py_XNewRef(values));
    Py_XSETREF(st->m_seen_defaults, Py_XNewRef(defaults));
}

/* Mirror.apply of Mirror.wants(values), then the record (Mirror.notify's solo branch): 0, or -1
 * with the exception of a get, put or push. Runs Python code (those): everything used is owned. */
static int
mirror_apply(engine_state *st, PyObject *values, unsigned long me)
{
    Py_ssize_t n = PyTuple_GET_SIZE(values);
    PyObject *defaults = mirror_defaults(st, n);
    if (defaults == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "backends: the process defaults are not what state.py publishes");
        return -1;
    }
    PyObject *sources = PyTuple_GET_ITEM(defaults, n);
    PyObject *wanted = Py_NewRef(st->m_wanted), *own = Py_NewRef(st->m_own);
    PyObject *accessors = Py_NewRef(st->m_accessors), *unset = Py_NewRef(st->m_unset);
    Py_ssize_t count = st->m_count, *slots = st->m_slots;
    int result = -1;
    Py_INCREF(values);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (PyList_GET_SIZE(wanted) != count || PyList_GET_SIZE(own) != count) {
            PyErr_SetString(PyExc_RuntimeError, "backends: a mirror's wanted and own lists changed size");
            goto done;
        }
        PyObject *want = mirror_want(st, values, defaults, sources, slots[i]);
        if (want == PyList_GET_ITEM(wanted, i)) {
            continue;
        }
        PyObject *access = PyTuple_GET_ITEM(accessors, i);
        PyObject *was = Py_NewRef(PyList_GET_ITEM(wanted, i)), *done = NULL;
        Py_INCREF(want);
        if (was == unset) { /* the flag takes over: the library's own value first */
            PyObject *theirs = PyObject_CallNoArgs(PyTuple_GET_ITEM(access, 0));
            if (theirs != NULL && PyList_SetItem(own, i, theirs) == 0) {
                done = PyObject_CallOneArg(PyTuple_GET_ITEM(access, 2), want);
            }
        }
        else if (want == unset) { /* the flag lets go: the library's own value back */
            PyObject *theirs = Py_NewRef(PyList_GET_ITEM(own, i));
            done = PyObject_CallOneArg(PyTuple_GET_ITEM(access, 1), theirs);
            Py_DECREF(theirs);
            if (done != NULL && PyList_SetItem(own, i, Py_NewRef(Py_None)) < 0) {
                Py_CLEAR(done);
            }
        }
        else {
            done = PyObject_CallOneArg(PyTuple_GET_ITEM(access, 2), want);
        }
        Py_DECREF(was);
        if (done == NULL) {
            Py_DECREF(want);
            goto done;
        }
        Py_DECREF(done);
        if (PyList_SetItem(wanted, i, want) < 0) { /* steals want */
            goto done;
        }
    }
    mirror_seen(st, me, 1, values, defaults);
    result = 0;
done:
    Py_DECREF(values);
    Py_DECREF(unset);
    Py_DECREF(accessors);
    Py_DECREF(own);
    Py_DECREF(wanted);
    Py_DECREF(defaults);
    return result;
}

/* Whether every followed flag wants, in values over the defaults, what is in force already (by
 * identity): Mirror.apply would change nothing. Runs no Python code; 0 where values or the
 * defaults are not what the engines make (then the locked path decides). */
static int
mirror_same(engine_state *st, PyObject *values, PyObject *defaults)
{
    Py_ssize_t n = PyTuple_GET_SIZE(st->empty), count = st->m_count;
    if (!PyTuple_CheckExact(values) || PyTuple_GET_SIZE(values) != n || defaults == NULL ||
        !PyTuple_CheckExact(defaults) || PyTuple_GET_SIZE(defaults) != n + 1 || PyList_GET_SIZE(st->m_wanted) != count) {
        return 0;
    }
    PyObject *sources = PyTuple_GET_ITEM(defaults, n);
    if (!PyTuple_CheckExact(sources) || PyTuple_GET_SIZE(sources) != n) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (mirror_want(st, values, defaults, sources, st->m_slots[i]) != PyList_GET_ITEM(st->m_wanted, i)) {
            return 0;
        }
    }
    return 1;
}

/* Mirror.notify: 0, or -1 with an exception (a push's, or the conflict warning made an error). */
static int
mirror_notify_values(engine_state *st, PyObject *values)
{
    if (st->mirror == NULL) {
        return 0;
    }
    unsigned long me = PyThread_get_thread_ident();
    PyObject *defaults = PyList_GET_SIZE(st->published) == 1 ? PyList_GET_ITEM(st->published, 0) : NULL;
    if (me == st->m_holder) {
        if (values == st->m_seen_values && defaults == st->m_seen_defaults) {
            return 0; /* nothing changed since this thread's last check */
        }
        if (st->m_solo && st->m_busy == 0 && mirror_same(st, values, defaults)) {
            mirror_seen(st, me, 1, values, defaults); /* other values, the same for the library */
            return 0;
        }
    }
    if (st->m_busy == me) {
        return 0; /* a push made from inside a push: the outer one decides */
    }
    while (st->m_busy != 0) { /* another thread's push (it runs Python code, so it can let this one in) */
        Py_BEGIN_ALLOW_THREADS
        Py_END_ALLOW_THREADS
    }
    st->m_busy = me;
    int result = 0;
    PyObject *mirror = Py_XNewRef(st->mirror); /* (removed while this thread waited: nothing to do) */
    if (mirror != NULL) {
        if (me == st->m_holder && st->m_solo && PyTuple_CheckExact(values) &&
            PyTuple_GET_SIZE(values) == PyTuple_GET_SIZE(st->empty)) {
            result = mirror_apply(st, values, me);
        }
        else {
            PyObject *arbitrate = Py_NewRef(st->m_arbitrate);
            PyObject *done = PyObject_CallOneArg(arbitrate, values);
            Py_DECREF(arbitrate);
            result = done == NULL ? -1 : 0;
            Py_XDECREF(done);
        }
        Py_DECREF(mirror);
    }
    st->m_busy = 0;
    return result;
}

/* The values of the current frame, owned, or NULL (no error) where it is not a frame an engine makes. */
static PyObject *
current_values(engine_state *st)
{
    PyObject *frame;
    if (PyContextVar_Get(st->overrides_var, st->no_scope, &frame) < 0) {
        return NULL;
    }
    PyObject *values = NULL;
    if (PyTuple_CheckExact(frame) && PyTuple_GET_SIZE(frame) == 3) {
        values = PyTuple_GET_ITEM(frame, 0);
    }
    else if (PyList_CheckExact(frame) && PyList_GET_SIZE(frame) == 3) { /* the pure path's entry */
        values = PyList_GET_ITEM(frame, 0);
    }
    values = values != NULL && PyTuple_CheckExact(values) ? Py_NewRef(values) : NULL;
    Py_DECREF(frame);
    return values;
}

/* mirror.sync(): the mirror brought in step with the current context. */
static int
mirror_sync_state(engine_state *st)
{
    if (st == NULL || st->mirror == NULL) {
        return 0;
    }
    PyObject *values = current_values(st);
    if (values == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    int result = mirror_notify_values(st, values);
    Py_DECREF(values);
    return result;
}

/* The same for backends.sync._speedups (a task step), through the capsule _mirror_sync. */
static int
mirror_sync_module(PyObject *module)
{
    return mirror_sync_state(module_state(module));
}

static PyObject *
enter(engine_state *st, PyObject *op)
{
    if (configured(st) == NULL) {
        return NULL;
    }
    ScopeCore *self = (ScopeCore *)op;
    PyObject *alone = self->alone;
    if (alone == NULL || !PyTuple_CheckExact(alone) || PyTuple_GET_SIZE(alone) != PyTuple_GET_SIZE(st->empty)) {
        /* not the values Scope() makes (missing, or set by hand): the pure path says what happens */
        return call_slow(st->str_enter_slow, op, NULL, 0, NULL);
    }
    Py_INCREF(alone); /* a finaliser run by an allocation below could replace _alone */
    PyObject *parent, *values = NULL, *frame = NULL, *token, *result = NULL;
    if (PyContextVar_Get(st->overrides_var, st->no_scope, &parent) < 0) {
        goto done;
    }
    PyObject *below = PyTuple_CheckExact(parent) && PyTuple_GET_SIZE(parent) == 3 ? PyTuple_GET_ITEM(parent, 0) : NULL;
    if (below == NULL || !PyTuple_CheckExact(below) || PyTuple_GET_SIZE(below) != PyTuple_GET_SIZE(alone)) {
        /* not a frame an engine makes (one set by hand): the pure path decides */
        Py_DECREF(parent);
        result = call_slow(st->str_enter_slow, op, NULL, 0, NULL);
        goto done;
    }
    int over = values_over(st, self, below, alone, &values); /* below is alive while parent is owned */
    Py_DECREF(parent);
    if (over == 1) {
        result = call_slow(st->str_enter_slow, op, NULL, 0, NULL);
        goto done;
    }
    if (over < 0) {
        goto done;
    }
    if (st->mirror != NULL && mirror_notify_values(st, values) < 0) {
        goto done; /* a push that raised: nothing is entered */
    }
    /* The frame is made first, as (values, scope, None), and its token filled in right after
     * publishing: nothing can exit this scope in between (no Python code runs here but a
     * garbage collection's finalisers, which then see a whole tuple). */
    frame = PyTuple_Pack(3, values, op, Py_None);
    if (frame == NULL) {
        goto done;
    }
    Held held;
    if (hold(&held) < 0) {
        goto done;
    }
    token = PyContextVar_Set(st->overrides_var, frame);
    if (token != NULL) {
        PyObject *none = PyTuple_GET_ITEM(frame, 2);
        PyTuple_SET_ITEM(frame, 2, token); /* the tuple takes our reference; only the context shares it */
        Py_DECREF(none);
        result = Py_NewRef(op);
    }
    release(&held);
done:
    Py_XDECREF(frame);
    Py_XDECREF(values);
    Py_DECREF(alone);
    return result;
}

static PyObject *
exit_(engine_state *st, PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (configured(st) == NULL) {
        return NULL;
    }
    if (nargs > 3 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0)) {
        return call_slow(st->str_exit_slow, op, args, nargs, kwnames); /* the pure path's TypeError */
    }
    PyObject *frame;
    if (PyContextVar_Get(st->overrides_var, st->no_scope, &frame) < 0) {
        return NULL;
    }
    PyObject *token = NULL;
    if (PyTuple_CheckExact(frame) && PyTuple_GET_SIZE(frame) == 3 && PyTuple_GET_ITEM(frame, 1) == op) {
        token = Py_NewRef(PyTuple_GET_ITEM(frame, 2));
    }
    if (token != NULL) {
        /* The frame is released only after the reset (as scope.py's __exit__ keeps it): CPython's
         * ContextVar.reset caches the value it restores after releasing the context's old
         * mapping, so a finaliser run inside it that sets the variable would leave that cache
         * pointing to a value only the token holds. */
        int failed = reset_held(st, token);
        Py_DECREF(token);
        Py_DECREF(frame);
        if (!failed) {
            if (st->mirror != NULL && mirror_sync_state(st) < 0) {
                return NULL; /* exited; a push that raised says so */
            }
            Py_RETURN_NONE;
        }
        /* a token of another context, or one already used: the pure path says which */
        if (!PyErr_ExceptionMatches(PyExc_ValueError) && !PyErr_ExceptionMatches(PyExc_RuntimeError) &&
            !PyErr_ExceptionMatches(PyExc_TypeError)) {
            return NULL;
        }
        PyErr_Clear();
    }
    else {
        Py_DECREF(frame);
    }
    return call_slow(st->str_exit_slow, op, args, nargs, NULL);
}

static PyObject *
scope_enter(PyObject *op, PyTypeObject *defining, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    engine_state *st = module_state(PyType_GetModule(defining));
    if (nargs != 0 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0)) {
        return configured(st) == NULL ? NULL : call_slow(st->str_enter_slow, op, args, nargs, kwnames);
    }
    return enter(st, op);
}

static PyObject *
scope_exit(PyObject *op, PyTypeObject *defining, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return exit_(module_state(PyType_GetModule(defining)), op, args, nargs, kwnames);
}

/* -- __aenter__ / __aexit__ ------------------------------------------------------------- *
 * As `async def` methods, they would leave a signal a moment where the scope is entered and no
 * `async with` will exit it: between the C entry and the caller's `async with`, and between
 * the call of __aexit__ and the first step of its coroutine. So __aenter__ returns an
 * awaitable whose one step is the C entry, and __aexit__ exits in C when called and returns an
 * awaitable of the result: a signal before the step enters nothing, one after the call of
 * __aexit__ finds the scope exited. */

typedef struct {
    PyObject_HEAD
    PyObject *module;
    PyObject *scope;  /* __aenter__: the scope its step enters; NULL once stepped */
    PyObject *result; /* __aexit__: what the exit returned; NULL once stepped */
} ScopeStep;

static PyObject *
new_step(PyObject *module, PyObject *scope, PyObject *result)
{
    ScopeStep *self = PyObject_GC_New(ScopeStep, module_state(module)->step_type);
    if (self == NULL) {
        Py_XDECREF(result);
        return NULL;
    }
    self->module = Py_NewRef(module);
    self->scope = Py_XNewRef(scope);
    self->result = result; /* stolen */
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

static PyObject *
scope_aenter(PyObject *op, PyTypeObject *defining, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs != 0 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0)) {
        PyErr_SetString(PyExc_TypeError, "__aenter__() takes no arguments");
        return NULL;
    }
    return new_step(PyType_GetModule(defining), op, NULL);
}

static PyObject *
scope_aexit(PyObject *op, PyTypeObject *defining, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *module = PyType_GetModule(defining);
    PyObject *result = exit_(module_state(module), op, args, nargs, kwnames);
    return result == NULL ? NULL : new_step(module, NULL, result);
}

static PySendResult
step_send(PyObject *op, PyObject *arg, PyObject **result)
{
    ScopeStep *self = (ScopeStep *)op;
    PyObject *scope = self->scope, *done = self->result;
    *result = NULL;
    if (arg != Py_None && (scope != NULL || done != NULL)) { /* as a coroutine not yet started */
        PyErr_SetString(PyExc_TypeError, "can't send non-None value to a just-started coroutine");
        return PYGEN_ERROR;
    }
    self->scope = self->result = NULL; /* one step, whatever happens */
    if (scope != NULL) {
        done = enter(module_state(self->module), scope);
        Py_DECREF(scope);
    }
    else if (done == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
    }
    *result = done;
    return done == NULL ? PYGEN_ERROR : PYGEN_RETURN;
}

static PyObject *
step_next_value(PyObject *op, PyObject *value)
{
    PyObject *result;
    if (step_send(op, value, &result) == PYGEN_ERROR) {
        return NULL;
    }
    if (result == Py_None) {
        PyErr_SetNone(PyExc_StopIteration);
    }
    else {
        PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, result);
        if (stop != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(stop), stop);
            Py_DECREF(stop);
        }
    }
    Py_DECREF(result);
    return NULL;
}

static PyObject *
step_iternext(PyObject *op)
{
    return step_next_value(op, Py_None);
}

static PyObject *
step_throw(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    /* thrown in before its one step (a cancellation): nothing is entered */
    ScopeStep *self = (ScopeStep *)op;
    Py_CLEAR(self->scope);
    Py_CLEAR(self->result);
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "throw() takes 1 to 3 arguments");
        return NULL;
    }
    PyObject *type = args[0], *value = nargs > 1 ? args[1] : Py_None;
    if (PyExceptionInstance_Check(type)) {
        PyErr_SetObject((PyObject *)Py_TYPE(type), type);
    }
    else if (PyExceptionClass_Check(type)) {
        PyErr_SetObject(type, value);
    }
    else {
        PyErr_SetString(PyExc_TypeError, "exceptions must be classes or instances deriving from BaseException");
    }
    return NULL;
}

static PyObject *
step_close(PyObject *op, PyObject *unused)
{
    ScopeStep *self = (ScopeStep *)op;
    Py_CLEAR(self->scope);
    Py_CLEAR(self->result);
    Py_RETURN_NONE;
}

static int
step_traverse(PyObject *op, visitproc visit, void *arg)
{
    ScopeStep *self = (ScopeStep *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->module);
    Py_VISIT(self->scope);
    Py_VISIT(self->result);
    return 0;
}

static int
step_clear(PyObject *op)
{
    ScopeStep *self = (ScopeStep *)op;
    Py_CLEAR(self->module);
    Py_CLEAR(self->scope);
    Py_CLEAR(self->result);
    return 0;
}

static void
step_dealloc(PyObject *op)
{
    dealloc_gc(op, step_clear);
}

static PyMethodDef step_methods[] = {
    {"send", step_next_value, METH_O, "Make the step (StopIteration carries the result)."},
    {"throw", (PyCFunction)(void (*)(void))step_throw, METH_FASTCALL, "Raise the exception: the step is not made."},
    {"close", step_close, METH_NOARGS, "Drop the step without making it."},
    {NULL},
};

static PyType_Slot step_slots[] = {
    {Py_tp_doc, "The awaitable of a scope's __aenter__ (its one step enters, in C) or __aexit__ (the result of the exit made)."},
    {Py_am_await, PyObject_SelfIter},
    {Py_am_send, step_send},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, step_iternext},
    {Py_tp_methods, step_methods},
    {Py_tp_traverse, step_traverse},
    {Py_tp_clear, step_clear},
    {Py_tp_dealloc, step_dealloc},
    {0, NULL},
};

static PyType_Spec step_spec = {
    .name = "backends._engine._speedups.ScopeStep",
    .basicsize = sizeof(ScopeStep),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = step_slots,
};

static int
scope_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(((ScopeCore *)op)->overrides);
    Py_VISIT(((ScopeCore *)op)->alone);
    Py_VISIT(((ScopeCore *)op)->memo);
    return 0;
}

static int
scope_clear(PyObject *op)
{
    Py_CLEAR(((ScopeCore *)op)->overrides);
    Py_CLEAR(((ScopeCore *)op)->alone);
    Py_CLEAR(((ScopeCore *)op)->memo);
    return 0;
}

static void
scope_dealloc(PyObject *op)
{
    /* (Python subclasses' own dealloc untracks, calls this, and releases their type) */
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    scope_clear(op);
    type->tp_free(op);
    Py_DECREF(type); /* a heap base's dealloc releases the instance's type (subtype_dealloc does not) */
}

#define METHOD_FLAGS (METH_METHOD | METH_FASTCALL | METH_KEYWORDS)

static PyMethodDef scope_methods[] = {
    {"__enter__", (PyCFunction)(void (*)(void))scope_enter, METHOD_FLAGS, "Enter the scope (see backends.Scope)."},
    {"__exit__", (PyCFunction)(void (*)(void))scope_exit, METHOD_FLAGS, "Exit the scope (see backends.Scope)."},
    {"__aenter__", (PyCFunction)(void (*)(void))scope_aenter, METHOD_FLAGS,
     "An awaitable that enters the scope (see backends.Scope)."},
    {"__aexit__", (PyCFunction)(void (*)(void))scope_aexit, METHOD_FLAGS,
     "Exit the scope (see backends.Scope) and return an awaitable of the result."},
    {NULL},
};

static PyMemberDef scope_members[] = {
    {"_overrides", OBJECT_MEMBER, offsetof(ScopeCore, overrides), 0, "the flags this scope sets"},
    {"_alone", OBJECT_MEMBER, offsetof(ScopeCore, alone), 0, "those as values: what entering publishes over no scope"},
    {"_memo", OBJECT_MEMBER, offsetof(ScopeCore, memo), 0, "(values below, merged values): the last merge"},
    {NULL},
};

static PyType_Slot scope_slots[] = {
    {Py_tp_doc, "The compiled entry and exit of backends.Scope."},
    /* no tp_new: object's, so object.__new__(Scope), copyreg's way of unpickling slot state,
     * works as on the pure path, and Scope.__setstate__ validates what it loads */
    {Py_tp_traverse, scope_traverse},
    {Py_tp_clear, scope_clear},
    {Py_tp_dealloc, scope_dealloc},
    {Py_tp_methods, scope_methods},
    {Py_tp_members, scope_members},
    {0, NULL},
};

static PyType_Spec scope_spec = {
    .name = "backends._engine._speedups.ScopeCore",
    .basicsize = sizeof(ScopeCore),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = scope_slots,
};

/* -- decorated calls ---------------------------------------------------------------------- *
 * A function decorated with a scope is a small Python function that hands each call to
 * Decorated.call(args, kwargs) (scope.py says why). For a plain function this is that call,
 * line for line: the frame before the entry, scope.__enter__(), fn(*args, **kwargs),
 * scope.__exit__(), and follow(scope, result) for a coroutine, generator or async generator
 * returned where none was expected. An exception from the entry or the call, or from the exit,
 * is handed to _unwind(scope, parent, error[, exiting=True]) as the pure path's `except
 * BaseException` does, and raised again. The other kinds call their pure-path wrapper (_inner). */

typedef struct {
    PyObject_HEAD
    PyObject *scope;
    PyObject *fn;
    PyObject *kind;
    PyObject *enter; /* scope.__enter__, bound */
    PyObject *exit;  /* scope.__exit__, bound */
    PyObject *inner; /* None for a function; else the pure path's wrapper of that kind */
} DecoratedCore;

/* The exception being raised, taken (normalised, with its traceback), or NULL if none. */
static PyObject *
take_exception(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (type == NULL) {
        return NULL;
    }
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL && value != NULL) {
        PyException_SetTraceback(value, traceback);
    }
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    return value;
#endif
}

/* Raise `error` (an exception instance) again, with its traceback; steals the reference. */
static void
give_exception(PyObject *error)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(error);
#else
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(error)), error, PyException_GetTraceback(error));
#endif
}

/* With an exception being raised: `except BaseException as error: _unwind(scope, parent, error,
 * exiting); raise`. The exception is raised again, or what the unwinding raised, with `error` as
 * its __context__ (it is the exception being handled while _unwind runs, as in that block). */
static void
unwind_raised(engine_state *st, PyObject *scope, PyObject *parent, int exiting)
{
    PyObject *error = take_exception();
    if (error == NULL) { /* a NULL result with no exception: a bug elsewhere, said so */
        PyErr_SetString(PyExc_SystemError, "a decorated call failed without an exception");
        return;
    }
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *handled = PyErr_GetHandledException();
    PyErr_SetHandledException(error);
#endif
    PyObject *args[4] = {scope, parent, error, exiting ? Py_True : Py_False};
    PyObject *unwind = Py_NewRef(st->unwind);
    PyObject *done = PyObject_Vectorcall(unwind, args, 4, NULL);
    Py_DECREF(unwind);
#if PY_VERSION_HEX >= 0x030B0000
    PyErr_SetHandledException(handled);
    Py_XDECREF(handled);
#endif
    if (done != NULL) {
        Py_DECREF(done);
        give_exception(error);
        return;
    }
    PyObject *other = take_exception();
    if (other == NULL) { /* (cannot be: done is NULL) */
        give_exception(error);
        return;
    }
    PyObject *context = other == error ? NULL : PyException_GetContext(other);
    if (other != error && context == NULL) {
        PyException_SetContext(other, error); /* steals error */
    }
    else {
        Py_XDECREF(context);
        Py_DECREF(error);
    }
    give_exception(other);
}

static PyObject *
decorated_call(PyObject *op, PyTypeObject *defining, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) || !PyTuple_Check(args[0]) ||
        (args[1] != Py_None && !PyDict_Check(args[1]))) {
        PyErr_SetString(PyExc_TypeError, "call(args, kwargs) takes a tuple and a dict");
        return NULL;
    }
    engine_state *st = configured(module_state(PyType_GetModule(defining)));
    if (st == NULL) {
        return NULL;
    }
    if (st->unwind == NULL || st->follow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "backends._engine._speedups.configure_calls() has not run");
        return NULL;
    }
    DecoratedCore *self = (DecoratedCore *)op;
    if (self->scope == NULL || self->fn == NULL || self->enter == NULL || self->exit == NULL || self->inner == NULL) {
        PyErr_SetString(PyExc_TypeError, "DecoratedCore is the compiled base of backends' Decorated: "
                                         "build it with Decorated(scope, fn, kind)");
        return NULL;
    }
    PyObject *positional = args[0], *keywords = args[1] == Py_None ? NULL : args[1];
    if (self->inner != Py_None) {
        PyObject *inner = Py_NewRef(self->inner);
        PyObject *result = PyObject_Call(inner, positional, keywords);
        Py_DECREF(inner);
        return result;
    }
    /* owned for the call: the members can be replaced while it runs */
    PyObject *scope = Py_NewRef(self->scope), *fn = Py_NewRef(self->fn);
    PyObject *enter = Py_NewRef(self->enter), *exit = Py_NewRef(self->exit);
    PyObject *parent = NULL, *result = NULL, *done;
    if (PyContextVar_Get(st->overrides_var, st->no_scope, &parent) < 0) {
        goto finish;
    }
    done = PyObject_CallNoArgs(enter);
    if (done == NULL) {
        unwind_raised(st, scope, parent, 0);
        goto finish;
    }
    Py_DECREF(done);
    result = PyObject_Call(fn, positional, keywords);
    if (result == NULL) {
        unwind_raised(st, scope, parent, 0);
        goto finish;
    }
    done = PyObject_CallNoArgs(exit);
    if (done == NULL) {
        Py_CLEAR(result);
        unwind_raised(st, scope, parent, 1);
        goto finish;
    }
    Py_DECREF(done);
    if (PyCoro_CheckExact(result) || PyGen_CheckExact(result) || PyAsyncGen_CheckExact(result)) {
        PyObject *follow = Py_NewRef(st->follow);
        PyObject *pair[2] = {scope, result};
        PyObject *followed = PyObject_Vectorcall(follow, pair, 2, NULL);
        Py_DECREF(follow);
        Py_SETREF(result, followed);
    }
finish:
    Py_XDECREF(parent);
    Py_DECREF(scope);
    Py_DECREF(fn);
    Py_DECREF(enter);
    Py_DECREF(exit);
    return result;
}

static int
decorated_traverse(PyObject *op, visitproc visit, void *arg)
{
    DecoratedCore *self = (DecoratedCore *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->scope);
    Py_VISIT(self->fn);
    Py_VISIT(self->kind);
    Py_VISIT(self->enter);
    Py_VISIT(self->exit);
    Py_VISIT(self->inner);
    return 0;
}

static int
decorated_clear(PyObject *op)
{
    DecoratedCore *self = (DecoratedCore *)op;
    Py_CLEAR(self->scope);
    Py_CLEAR(self->fn);
    Py_CLEAR(self->kind);
    Py_CLEAR(self->enter);
    Py_CLEAR(self->exit);
    Py_CLEAR(self->inner);
    return 0;
}

static void
decorated_dealloc(PyObject *op)
{
    /* as scope_dealloc: a Python subclass's dealloc calls this */
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    decorated_clear(op);
    type->tp_free(op);
    Py_DECREF(type);
}

static PyMethodDef decorated_methods[] = {
    {"call", (PyCFunction)(void (*)(void))decorated_call, METHOD_FLAGS,
     "call(args, kwargs): fn(*args, **kwargs) under the scope (see backends' Decorated)."},
    {NULL},
};

static PyMemberDef decorated_members[] = {
    {"scope", OBJECT_MEMBER, offsetof(DecoratedCore, scope), 0, "the scope"},
    {"fn", OBJECT_MEMBER, offsetof(DecoratedCore, fn), 0, "the function it applies to"},
    {"kind", OBJECT_MEMBER, offsetof(DecoratedCore, kind), 0, "what fn is: function, coroutine, generator, ..."},
    {"_enter", OBJECT_MEMBER, offsetof(DecoratedCore, enter), 0, "scope.__enter__"},
    {"_exit", OBJECT_MEMBER, offsetof(DecoratedCore, exit), 0, "scope.__exit__"},
    {"_inner", OBJECT_MEMBER, offsetof(DecoratedCore, inner), 0, "None, or the pure path's wrapper of that kind"},
    {NULL},
};

static PyType_Slot decorated_slots[] = {
    {Py_tp_doc, "The compiled call of backends' Decorated."},
    {Py_tp_traverse, decorated_traverse},
    {Py_tp_clear, decorated_clear},
    {Py_tp_dealloc, decorated_dealloc},
    {Py_tp_methods, decorated_methods},
    {Py_tp_members, decorated_members},
    {0, NULL},
};

static PyType_Spec decorated_spec = {
    .name = "backends._engine._speedups.DecoratedCore",
    .basicsize = sizeof(DecoratedCore),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = decorated_slots,
};

/* -- namespace flags(...) ---------------------------------------------------------------- */

/* The common call of a namespace's flags(): one bool keyword, flags(deterministic=True). Its
 * scopes are made once, at import (namespace.py's `single` table); every other call goes to
 * the pure path's flags(), which this object also is for every attribute (its __doc__,
 * __wrapped__ for inspect.signature, __name__, ...). A str subclass keyword, or any other
 * call, is handed over as it is: the pure function decides. */
typedef struct {
    PyObject_HEAD
    PyObject *single;   /* {keyword: (scope for False, scope for True)}, a dict of its own */
    PyObject *fallback; /* namespace.py's flags() */
    vectorcallfunc vectorcall;
    PyObject *weakreflist;
} FastFlags;

static PyObject *
fastflags_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    FastFlags *self = (FastFlags *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs == 0 && kwnames != NULL && PyTuple_GET_SIZE(kwnames) == 1) {
        PyObject *value = args[0];
        PyObject *keyword = PyTuple_GET_ITEM(kwnames, 0);
        /* an exact str only (its hash is cached, and the table's keys are exact str): no
         * Python code runs in this look-up */
        if ((value == Py_True || value == Py_False) && PyUnicode_CheckExact(keyword)) {
            PyObject *pair = PyDict_GetItemWithError(self->single, keyword);
            if (pair != NULL && PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2) {
                return Py_NewRef(PyTuple_GET_ITEM(pair, value == Py_True ? 1 : 0));
            }
            if (PyErr_Occurred()) {
                return NULL;
            }
        }
    }
    PyObject *fallback = Py_NewRef(self->fallback);
    PyObject *result = PyObject_Vectorcall(fallback, args, nargsf, kwnames);
    Py_DECREF(fallback);
    return result;
}

static PyObject *
fastflags_call(PyObject *op, PyObject *args, PyObject *kwargs)
{
    return PyObject_Call(((FastFlags *)op)->fallback, args, kwargs);
}

/* Everything but the call is the pure path's function's: its attributes (read and set), its
 * binding as a method when it is a class attribute, weak references, copying (itself) and
 * pickling (refused as for that function: a local object). */
static PyObject *
fastflags_getattro(PyObject *op, PyObject *name)
{
    /* a heap type's dict has __module__ (this file's): the function's is the one to show */
    if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "__module__") == 0) {
        return PyObject_GetAttr(((FastFlags *)op)->fallback, name);
    }
    PyObject *own = PyObject_GenericGetAttr(op, name); /* __copy__, __reduce__, __doc__: ours */
    if (own != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError)) {
        return own;
    }
    PyErr_Clear();
    return PyObject_GetAttr(((FastFlags *)op)->fallback, name);
}

static int
fastflags_setattro(PyObject *op, PyObject *name, PyObject *value)
{
    return PyObject_SetAttr(((FastFlags *)op)->fallback, name, value);
}

static PyObject *
fastflags_descr_get(PyObject *op, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        return Py_NewRef(op);
    }
    return PyMethod_New(op, obj); /* as a function does */
}

static PyObject *
fastflags_doc(PyObject *op, void *closure)
{
    return PyObject_GetAttrString(((FastFlags *)op)->fallback, "__doc__");
}

static PyObject *
fastflags_self(PyObject *op, PyObject *unused)
{
    return Py_NewRef(op);
}

static PyObject *
fastflags_reduce(PyObject *op, PyObject *unused)
{
    /* a qualified name: pickle looks it up, and refuses a local one as for the function */
    return PyObject_GetAttrString(((FastFlags *)op)->fallback, "__qualname__");
}

static PyMethodDef fastflags_methods[] = {
    {"__copy__", fastflags_self, METH_NOARGS, NULL},
    {"__deepcopy__", fastflags_self, METH_O, NULL},
    {"__reduce__", fastflags_reduce, METH_NOARGS, NULL},
    {NULL},
};

static PyGetSetDef fastflags_getset[] = {
    {"__doc__", fastflags_doc, NULL, NULL, NULL},
    {NULL},
};

static PyMemberDef fastflags_members[] = {
    {"__vectorcalloffset__", SSIZE_MEMBER, offsetof(FastFlags, vectorcall), READONLY_MEMBER},
    {"__weaklistoffset__", SSIZE_MEMBER, offsetof(FastFlags, weakreflist), READONLY_MEMBER},
    {NULL},
};

static int
fastflags_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(((FastFlags *)op)->single);
    Py_VISIT(((FastFlags *)op)->fallback);
    return 0;
}

static int
fastflags_clear(PyObject *op)
{
    Py_CLEAR(((FastFlags *)op)->single);
    Py_CLEAR(((FastFlags *)op)->fallback);
    return 0;
}

static void
fastflags_dealloc(PyObject *op)
{
    if (((FastFlags *)op)->weakreflist != NULL) {
        PyObject_ClearWeakRefs(op);
    }
    dealloc_gc(op, fastflags_clear);
}

static PyObject *
fastflags_repr(PyObject *op)
{
    return PyObject_Repr(((FastFlags *)op)->fallback);
}

static PyType_Slot fastflags_slots[] = {
    {Py_tp_call, fastflags_call},
    {Py_tp_getattro, fastflags_getattro},
    {Py_tp_setattro, fastflags_setattro},
    {Py_tp_descr_get, fastflags_descr_get},
    {Py_tp_methods, fastflags_methods},
    {Py_tp_getset, fastflags_getset},
    {Py_tp_members, fastflags_members},
    {Py_tp_repr, fastflags_repr},
    {Py_tp_traverse, fastflags_traverse},
    {Py_tp_clear, fastflags_clear},
    {Py_tp_dealloc, fastflags_dealloc},
    {0, NULL},
};

static PyType_Spec fastflags_spec = {
    .name = "backends._engine._speedups.FastFlags",
    .basicsize = sizeof(FastFlags),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = fastflags_slots,
};

static PyObject *
fast_flags(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyDict_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "fast_flags(single, fallback) takes a dict and a callable");
        return NULL;
    }
    PyObject *single = PyDict_Copy(args[0]); /* its own: nobody else can change it */
    if (single == NULL) {
        return NULL;
    }
    FastFlags *self = PyObject_GC_New(FastFlags, module_state(module)->fastflags_type);
    if (self == NULL) {
        Py_DECREF(single);
        return NULL;
    }
    self->single = single;
    self->fallback = Py_NewRef(args[1]);
    self->vectorcall = fastflags_vectorcall;
    self->weakreflist = NULL;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* -- module ------------------------------------------------------------------------------ */

static PyObject *
configure(PyObject *module, PyObject *args)
{
    PyObject *var, *no_scope, *empty, *published;
    if (!PyArg_ParseTuple(args, "O!O!O!O!:configure", &PyContextVar_Type, &var, &PyTuple_Type, &no_scope, &PyTuple_Type,
                          &empty, &PyList_Type, &published)) {
        return NULL;
    }
    /* Again only when scope.py is reloaded (importlib.reload): this module's objects then use
     * what it passes, as the reloaded pure-Python code does. Another import of backends has a
     * module (and a state) of its own. */
    engine_state *st = module_state(module);
    Py_XSETREF(st->overrides_var, Py_NewRef(var));
    Py_XSETREF(st->no_scope, Py_NewRef(no_scope));
    Py_XSETREF(st->empty, Py_NewRef(empty));
    Py_XSETREF(st->published, Py_NewRef(published));
    Py_RETURN_NONE;
}

/* state.set_frame and state.reset_frame on 3.11 (see hold()): the variable's set() and reset(). */
static PyObject *
set_frame(PyObject *module, PyObject *frame)
{
    engine_state *st = configured(module_state(module));
    if (st == NULL) {
        return NULL;
    }
    Held held;
    if (hold(&held) < 0) {
        return NULL;
    }
    PyObject *token = PyContextVar_Set(st->overrides_var, frame);
    release(&held);
    return token;
}

static PyObject *
reset_frame(PyObject *module, PyObject *token)
{
    engine_state *st = configured(module_state(module));
    if (st == NULL || reset_held(st, token) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static void
mirror_clear(engine_state *st)
{
    Py_CLEAR(st->mirror);
    Py_CLEAR(st->m_arbitrate);
    Py_CLEAR(st->m_accessors);
    Py_CLEAR(st->m_wanted);
    Py_CLEAR(st->m_own);
    Py_CLEAR(st->m_unset);
    Py_CLEAR(st->m_default_source);
    Py_CLEAR(st->m_seen_values);
    Py_CLEAR(st->m_seen_defaults);
    PyMem_Free(st->m_slots);
    st->m_slots = NULL;
    st->m_count = 0;
    st->m_holder = 0;
    st->m_solo = 1;
}

/* A Mirror's attribute, owned, checked to be of `type` (and of `size` items where size >= 0). */
static PyObject *
mirror_attribute(PyObject *mirror, const char *name, PyTypeObject *type, Py_ssize_t size)
{
    PyObject *value = PyObject_GetAttrString(mirror, name);
    if (value != NULL && (Py_TYPE(value) != type || (size >= 0 && PyObject_Length(value) != size))) {
        PyErr_Format(PyExc_TypeError, "mirror_configure(): Mirror.%s is not a %s of %zd items", name, type->tp_name,
                     size);
        Py_CLEAR(value);
    }
    return value;
}

static PyObject *
mirror_configure(PyObject *module, PyObject *args)
{
    PyObject *mirror, *unset, *default_source;
    if (!PyArg_ParseTuple(args, "OOU:mirror_configure", &mirror, &unset, &default_source)) {
        return NULL;
    }
    engine_state *st = configured(module_state(module));
    if (st == NULL) {
        return NULL;
    }
    if (mirror == Py_None) {
        mirror_clear(st);
        Py_RETURN_NONE;
    }
    Py_ssize_t size = PyTuple_GET_SIZE(st->empty);
    PyObject *slots = mirror_attribute(mirror, "slots", &PyTuple_Type, -1), *accessors = NULL, *wanted = NULL;
    PyObject *own = NULL, *arbitrate = NULL;
    Py_ssize_t count = slots == NULL ? 0 : PyTuple_GET_SIZE(slots), *indexes = NULL;
    if (slots == NULL || (accessors = mirror_attribute(mirror, "accessors", &PyTuple_Type, count)) == NULL ||
        (wanted = mirror_attribute(mirror, "wanted", &PyList_Type, count)) == NULL ||
        (own = mirror_attribute(mirror, "own", &PyList_Type, count)) == NULL ||
        (arbitrate = PyObject_GetAttrString(mirror, "arbitrate")) == NULL) {
        goto fail;
    }
    indexes = PyMem_New(Py_ssize_t, count > 0 ? count : 1);
    if (indexes == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *access = PyTuple_GET_ITEM(accessors, i);
        indexes[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, i));
        if (indexes[i] == -1 && PyErr_Occurred()) {
            goto fail;
        }
        if (indexes[i] < 0 || indexes[i] >= size || !PyTuple_CheckExact(access) || PyTuple_GET_SIZE(access) != 3 ||
            !PyCallable_Check(PyTuple_GET_ITEM(access, 0)) || !PyCallable_Check(PyTuple_GET_ITEM(access, 1)) ||
            !PyCallable_Check(PyTuple_GET_ITEM(access, 2))) {
            PyErr_SetString(PyExc_ValueError, "mirror_configure(): a slot out of range, or accessors that are not "
                                              "(get, put, push) callables");
            goto fail;
        }
    }
    mirror_clear(st);
    st->mirror = Py_NewRef(mirror);
    st->m_arbitrate = arbitrate;
    st->m_accessors = accessors;
    st->m_wanted = wanted;
    st->m_own = own;
    st->m_unset = Py_NewRef(unset);
    st->m_default_source = Py_NewRef(default_source);
    st->m_slots = indexes;
    st->m_count = count;
    Py_DECREF(slots);
    Py_RETURN_NONE;
fail:
    PyMem_Free(indexes);
    Py_XDECREF(arbitrate);
    Py_XDECREF(own);
    Py_XDECREF(wanted);
    Py_XDECREF(accessors);
    Py_XDECREF(slots);
    return NULL;
}

static PyObject *
mirror_settle(PyObject *module, PyObject *args)
{
    unsigned long holder;
    int solo;
    PyObject *values, *defaults;
    if (!PyArg_ParseTuple(args, "kpOO:mirror_settle", &holder, &solo, &values, &defaults)) {
        return NULL;
    }
    mirror_seen(module_state(module), holder, solo, values, defaults);
    Py_RETURN_NONE;
}

static PyObject *
mirror_notify(PyObject *module, PyObject *values)
{
    engine_state *st = configured(module_state(module));
    if (st == NULL || mirror_notify_values(st, values) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
mirror_after_fork(PyObject *module, PyObject *unused)
{
    /* a push under way in a thread that the child does not have never ends there */
    module_state(module)->m_busy = 0;
    Py_RETURN_NONE;
}

static PyObject *
configure_calls(PyObject *module, PyObject *args)
{
    PyObject *unwind, *follow;
    if (!PyArg_ParseTuple(args, "OO:configure_calls", &unwind, &follow)) {
        return NULL;
    }
    if (!PyCallable_Check(unwind) || !PyCallable_Check(follow)) {
        PyErr_SetString(PyExc_TypeError, "configure_calls(unwind, follow) takes two callables");
        return NULL;
    }
    engine_state *st = module_state(module);
    Py_XSETREF(st->unwind, Py_NewRef(unwind));
    Py_XSETREF(st->follow, Py_NewRef(follow));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(overrides, NO_SCOPE, EMPTY, published): the engine's ContextVar, its default, "
     "the values of no override and the cell of the process defaults."},
    {"set_frame", set_frame, METH_O, "set_frame(frame): the engine's ContextVar.set, safe from finalisers on 3.11."},
    {"reset_frame", reset_frame, METH_O, "reset_frame(token): the engine's ContextVar.reset, safe from finalisers on 3.11."},
    {"flag_descriptor", (PyCFunction)(void (*)(void))flag_descriptor, METH_FASTCALL,
     "flag_descriptor(name, slot, property): a flag attribute that reads in C."},
    {"configure_calls", configure_calls, METH_VARARGS,
     "configure_calls(unwind, follow): the pure path's helpers of a decorated call (scope.py)."},
    {"fast_flags", (PyCFunction)(void (*)(void))fast_flags, METH_FASTCALL,
     "fast_flags(single, fallback): a namespace's flags() with its one-bool-keyword calls in C."},
    {"mirror_configure", mirror_configure, METH_VARARGS,
     "mirror_configure(mirror or None, UNSET, 'default'): the Mirror that scope entry and exit notify."},
    {"mirror_settle", mirror_settle, METH_VARARGS,
     "mirror_settle(holder, solo, values, defaults): Mirror.settle's record, for the fast path."},
    {"mirror_notify", mirror_notify, METH_O, "mirror_notify(values): Mirror.notify, with its fast paths in C."},
    {"mirror_after_fork", mirror_after_fork, METH_NOARGS, "Forget, in a forked child, a push under way at the fork."},
    {NULL},
};

static int
add_type(PyObject *module, PyType_Spec *spec, PyObject *base, PyTypeObject **slot)
{
    *slot = (PyTypeObject *)PyType_FromModuleAndSpec(module, spec, base);
    return *slot == NULL ? -1 : PyModule_AddType(module, *slot);
}

static int
engine_exec(PyObject *module)
{
    if (PyModule_AddIntConstant(module, "INTERFACE", BACKENDS_INTERFACE) < 0) {
        return -1;
    }
    engine_state *st = module_state(module);
    st->str_exit_slow = PyUnicode_InternFromString("_exit_slow");
    st->str_enter_slow = PyUnicode_InternFromString("_enter_slow");
    if (st->str_exit_slow == NULL || st->str_enter_slow == NULL) {
        return -1;
    }
    st->m_solo = 1;
    /* mirror_sync_module for backends.sync._speedups: a task step's check, without a Python call */
    PyObject *capsule = PyCapsule_New((void *)mirror_sync_module, "backends._engine._speedups._mirror_sync", NULL);
    if (capsule == NULL || PyModule_AddObjectRef(module, "_mirror_sync", capsule) < 0) {
        Py_XDECREF(capsule);
        return -1;
    }
    Py_DECREF(capsule);
    if (add_type(module, &flag_spec, NULL, &st->flag_type) < 0 ||
        add_type(module, &scope_spec, NULL, &st->scope_type) < 0 ||
        add_type(module, &fastflags_spec, NULL, &st->fastflags_type) < 0 ||
        add_type(module, &step_spec, NULL, &st->step_type) < 0 ||
        add_type(module, &decorated_spec, NULL, &st->decorated_type) < 0) {
        return -1;
    }
    return 0;
}

static int
engine_traverse(PyObject *module, visitproc visit, void *arg)
{
    engine_state *st = module_state(module);
    Py_VISIT(st->overrides_var);
    Py_VISIT(st->no_scope);
    Py_VISIT(st->empty);
    Py_VISIT(st->published);
    Py_VISIT(st->flag_type);
    Py_VISIT(st->scope_type);
    Py_VISIT(st->fastflags_type);
    Py_VISIT(st->step_type);
    Py_VISIT(st->mirror);
    Py_VISIT(st->m_arbitrate);
    Py_VISIT(st->m_accessors);
    Py_VISIT(st->m_wanted);
    Py_VISIT(st->m_own);
    Py_VISIT(st->m_unset);
    Py_VISIT(st->m_seen_values);
    Py_VISIT(st->m_seen_defaults);
    Py_VISIT(st->unwind);
    Py_VISIT(st->follow);
    Py_VISIT(st->decorated_type);
    return 0;
}

static int
engine_clear(PyObject *module)
{
    engine_state *st = module_state(module);
    Py_CLEAR(st->overrides_var);
    Py_CLEAR(st->no_scope);
    Py_CLEAR(st->empty);
    Py_CLEAR(st->published);
    Py_CLEAR(st->str_exit_slow);
    Py_CLEAR(st->str_enter_slow);
    Py_CLEAR(st->flag_type);
    Py_CLEAR(st->scope_type);
    Py_CLEAR(st->fastflags_type);
    Py_CLEAR(st->step_type);
    mirror_clear(st);
    Py_CLEAR(st->unwind);
    Py_CLEAR(st->follow);
    Py_CLEAR(st->decorated_type);
    return 0;
}

static void
engine_free(void *module)
{
    engine_clear((PyObject *)module);
}

static PyModuleDef_Slot engine_slots[] = {
    {Py_mod_exec, engine_exec},
#ifdef Py_mod_multiple_interpreters
    /* nothing is shared between interpreters: each has its own module, state and types */
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef engine_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "backends._engine._speedups",
    .m_doc = "The compiled path of the engine's flag reads and scope entry and exit (see the C source).",
    .m_size = sizeof(engine_state),
    .m_methods = module_methods,
    .m_slots = engine_slots,
    .m_traverse = engine_traverse,
    .m_clear = engine_clear,
    .m_free = engine_free,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&engine_module);
}
