/* The compiled path of the engine's two hot operations: reading a flag and entering and
 * exiting a scope. The pure-Python engine (state.py, scope.py, namespace.py) is the reference
 * and defines every behaviour; this file only does, faster, the common case of each:
 *
 *   FlagDescriptor.__get__  the current frame's override, else the process default
 *                           (namespace.py's property getter, line for line);
 *   ScopeCore.__enter__     publish {**parent, **overrides, ENTRY: (scope, token)} (scope.py);
 *   ScopeCore.__exit__      reset the token when this scope is the innermost entry; anything
 *                           else (an out-of-order exit, another context, an exception walking
 *                           the chain) is handed to the pure-Python Scope._exit_slow;
 *   FastFlags               a namespace's flags(one_bool_keyword=True): the scope made at
 *                           import; any other call is the pure path's flags() itself.
 *
 * Setting and deleting a flag attribute, and reading it on the class, go to the property the
 * pure path would use. No Python code runs between publishing a frame and recording its entry,
 * so no signal handler can see a half-entered scope (the pure path needs a try/except there).
 * Built for the GIL build of CPython only (see hatch_build.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* Set by configure(): the ContextVar of frames, its default (the empty frame), ENTRY and the
 * state module's namespace, where state.published (the process defaults) is rebound by every
 * write: read there at each read, so a read never sees defaults the pure path does not. */
static PyObject *overrides_var = NULL;
static PyObject *no_scope = NULL;
static PyObject *state_dict = NULL;
static PyObject *entry_key = NULL;
static PyObject *str_exit_slow = NULL;
static PyObject *str_enter_slow = NULL;
static PyObject *str_published = NULL;

static int
configured(void)
{
    if (overrides_var == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "backends._engine._speedups is not configured");
        return 0;
    }
    return 1;
}

/* -- flag reads ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *name;      /* the dotted flag name */
    PyObject *property;  /* the pure path's property: class access, setting, deleting, __doc__ */
    /* The last read outside any scope: the defaults it read (held, so the address cannot be
     * reused; defaults are never changed once published) and the value. No frame is kept, so
     * no exited scope is kept alive by a read. */
    PyObject *last_published, *last_value;
} FlagDescriptor;

static PyObject *
flag_get(PyObject *op, PyObject *obj, PyObject *type)
{
    FlagDescriptor *self = (FlagDescriptor *)op;
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self->property);
        return self->property;
    }
    if (!configured()) {
        return NULL;
    }
    PyObject *frame;
    if (PyContextVar_Get(overrides_var, no_scope, &frame) < 0) {
        return NULL;
    }
    PyObject *published = PyDict_GetItemWithError(state_dict, str_published); /* borrowed */
    if (published == NULL) {
        Py_DECREF(frame);
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "backends._engine.state has no published defaults");
        }
        return NULL;
    }
    int outside = frame == no_scope;
    if (outside && published == self->last_published) {
        Py_DECREF(frame);
        return Py_NewRef(self->last_value);
    }
    PyObject *value = outside ? NULL : PyDict_GetItemWithError(frame, self->name); /* borrowed */
    if (value != NULL) {
        Py_INCREF(value);
        Py_DECREF(frame);
        return value;
    }
    Py_DECREF(frame);
    if (PyErr_Occurred()) {
        return NULL;
    }
    value = PyObject_GetItem(published, self->name); /* a new reference; KeyError if missing */
    if (value != NULL && outside) {
        Py_XSETREF(self->last_published, Py_NewRef(published));
        Py_XSETREF(self->last_value, Py_NewRef(value));
    }
    return value;
}

static int
flag_set(PyObject *op, PyObject *obj, PyObject *value)
{
    FlagDescriptor *self = (FlagDescriptor *)op;
    descrsetfunc set = Py_TYPE(self->property)->tp_descr_set;
    return set(self->property, obj, value);
}

static int
flag_init(PyObject *op, PyObject *args, PyObject *kwargs)
{
    FlagDescriptor *self = (FlagDescriptor *)op;
    static char *keywords[] = {"name", "property", NULL};
    PyObject *name, *property;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UO:FlagDescriptor", keywords, &name, &property)) {
        return -1;
    }
    if (Py_TYPE(property)->tp_descr_set == NULL) {
        PyErr_SetString(PyExc_TypeError, "FlagDescriptor needs a data descriptor (a property)");
        return -1;
    }
    Py_INCREF(name);
    Py_XSETREF(self->name, name);
    Py_INCREF(property);
    Py_XSETREF(self->property, property);
    return 0;
}

static int
flag_traverse(PyObject *op, visitproc visit, void *arg)
{
    FlagDescriptor *self = (FlagDescriptor *)op;
    Py_VISIT(self->name);
    Py_VISIT(self->property);
    Py_VISIT(self->last_published);
    Py_VISIT(self->last_value);
    return 0;
}

static int
flag_clear(PyObject *op)
{
    FlagDescriptor *self = (FlagDescriptor *)op;
    Py_CLEAR(self->name);
    Py_CLEAR(self->property);
    Py_CLEAR(self->last_published);
    Py_CLEAR(self->last_value);
    return 0;
}

static void
flag_dealloc(PyObject *op)
{
    PyObject_GC_UnTrack(op);
    flag_clear(op);
    Py_TYPE(op)->tp_free(op);
}

static PyObject *
flag_doc(PyObject *op, void *closure)
{
    return PyObject_GetAttrString(((FlagDescriptor *)op)->property, "__doc__");
}

static PyMemberDef flag_members[] = {
    {"name", T_OBJECT, offsetof(FlagDescriptor, name), READONLY, "the dotted flag name"},
    {"property", T_OBJECT, offsetof(FlagDescriptor, property), READONLY, "the pure-Python property"},
    {NULL},
};

static PyGetSetDef flag_getset[] = {
    {"__doc__", flag_doc, NULL, NULL, NULL},
    {NULL},
};

static PyTypeObject FlagDescriptorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "backends._engine._speedups.FlagDescriptor",
    .tp_basicsize = sizeof(FlagDescriptor),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A flag attribute: reads in C, everything else through the pure path's property.",
    .tp_new = PyType_GenericNew,
    .tp_init = flag_init,
    .tp_traverse = flag_traverse,
    .tp_clear = flag_clear,
    .tp_dealloc = flag_dealloc,
    .tp_descr_get = flag_get,
    .tp_descr_set = flag_set,
    .tp_members = flag_members,
    .tp_getset = flag_getset,
};

/* -- scope entry and exit --------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *overrides; /* Scope._overrides: a dict of checked values, never changed once set */
} ScopeCore;

static PyObject *
scope_enter(PyObject *op, PyObject *unused)
{
    ScopeCore *self = (ScopeCore *)op;
    if (!configured()) {
        return NULL;
    }
    if (self->overrides == NULL || !PyDict_CheckExact(self->overrides)) {
        /* not the dict Scope() makes (missing, or set by hand): the pure path says what happens */
        PyObject *call[1] = {op};
        return PyObject_VectorcallMethod(str_enter_slow, call, 1, NULL);
    }
    PyObject *parent;
    if (PyContextVar_Get(overrides_var, no_scope, &parent) < 0) {
        return NULL;
    }
    /* {**parent, **overrides}: below no other scope, a copy of the overrides alone (one
     * allocation of a table that also has room for the entry) */
    PyObject *frame = PyDict_Copy(PyDict_GET_SIZE(parent) == 0 ? self->overrides : parent);
    int below_none = PyDict_GET_SIZE(parent) == 0;
    Py_DECREF(parent);
    if (frame == NULL) {
        return NULL;
    }
    /* The entry is made first, as (scope, None), and its token filled in right after
     * publishing: nothing can exit this scope in between (no Python code runs here but a
     * garbage collection's finalisers, which then see a whole tuple). */
    PyObject *entry = PyTuple_Pack(2, op, Py_None);
    if (entry == NULL || (!below_none && PyDict_Update(frame, self->overrides) < 0) ||
        PyDict_SetItem(frame, entry_key, entry) < 0) {
        Py_XDECREF(entry);
        Py_DECREF(frame);
        return NULL;
    }
    PyObject *token = PyContextVar_Set(overrides_var, frame);
    Py_DECREF(frame); /* the context holds it now */
    if (token == NULL) {
        Py_DECREF(entry);
        return NULL;
    }
    PyObject *none = PyTuple_GET_ITEM(entry, 1);
    PyTuple_SET_ITEM(entry, 1, token); /* the tuple takes our reference; only the frame shares it */
    Py_DECREF(none);
    Py_DECREF(entry); /* the frame holds it */
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *
exit_slow(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    /* Scope._exit_slow(*args, **kwargs): every case but the common one, in Python */
    Py_ssize_t total = nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames));
    PyObject **call = PyMem_Malloc((size_t)(total + 1) * sizeof(PyObject *));
    if (call == NULL) {
        return PyErr_NoMemory();
    }
    call[0] = op;
    for (Py_ssize_t i = 0; i < total; i++) {
        call[1 + i] = args[i];
    }
    PyObject *result = PyObject_VectorcallMethod(str_exit_slow, call, (size_t)(1 + nargs), kwnames);
    PyMem_Free(call);
    return result;
}

static PyObject *
scope_exit(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (!configured()) {
        return NULL;
    }
    if (nargs > 3 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0)) {
        return exit_slow(op, args, nargs, kwnames); /* the pure path's TypeError, or keywords */
    }
    PyObject *frame;
    if (PyContextVar_Get(overrides_var, no_scope, &frame) < 0) {
        return NULL;
    }
    PyObject *entry = PyDict_GetItemWithError(frame, entry_key); /* borrowed from the frame */
    if (entry != NULL && PyTuple_CheckExact(entry) && PyTuple_GET_SIZE(entry) == 2 &&
        PyTuple_GET_ITEM(entry, 0) == op) {
        PyObject *token = PyTuple_GET_ITEM(entry, 1);
        Py_INCREF(token);
        Py_DECREF(frame);
        int failed = PyContextVar_Reset(overrides_var, token);
        Py_DECREF(token);
        if (!failed) {
            Py_RETURN_NONE;
        }
        /* a token of another context, or one already used: the pure path says which */
        if (!PyErr_ExceptionMatches(PyExc_ValueError) && !PyErr_ExceptionMatches(PyExc_RuntimeError)) {
            return NULL;
        }
        PyErr_Clear();
    }
    else {
        Py_DECREF(frame);
        if (PyErr_Occurred()) {
            return NULL;
        }
    }
    return exit_slow(op, args, nargs, NULL);
}

static int
scope_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(((ScopeCore *)op)->overrides);
    return 0;
}

static int
scope_clear(PyObject *op)
{
    Py_CLEAR(((ScopeCore *)op)->overrides);
    return 0;
}

static void
scope_dealloc(PyObject *op)
{
    /* (Python subclasses' own dealloc untracks, calls this, and releases their type) */
    PyObject_GC_UnTrack(op);
    scope_clear(op);
    Py_TYPE(op)->tp_free(op);
}

static PyMethodDef scope_methods[] = {
    {"__enter__", scope_enter, METH_NOARGS, "Enter the scope (see backends.Scope)."},
    {"__exit__", (PyCFunction)(void (*)(void))scope_exit, METH_FASTCALL | METH_KEYWORDS,
     "Exit the scope (see backends.Scope)."},
    {NULL},
};

static PyMemberDef scope_members[] = {
    {"_overrides", T_OBJECT_EX, offsetof(ScopeCore, overrides), 0, "the flags this scope sets"},
    {NULL},
};

static PyTypeObject ScopeCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "backends._engine._speedups.ScopeCore",
    .tp_basicsize = sizeof(ScopeCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The compiled entry and exit of backends.Scope.",
    /* tp_new: object's (set at init), so object.__new__(Scope), copyreg's way of unpickling
     * slot state, works as on the pure path, and Scope.__setstate__ validates what it loads */
    .tp_traverse = scope_traverse,
    .tp_clear = scope_clear,
    .tp_dealloc = scope_dealloc,
    .tp_methods = scope_methods,
    .tp_members = scope_members,
};

/* -- namespace flags(...) ---------------------------------------------------------------- */

/* The common call of a namespace's flags(): one bool keyword, flags(deterministic=True). Its
 * scopes are made once, at import (namespace.py's `single` table); every other call goes to
 * the pure path's flags(), which this object also is for every attribute (its __doc__,
 * __wrapped__ for inspect.signature, __name__, ...). A str subclass keyword, or any other
 * call, is handed over as it is: the pure function decides. */
typedef struct {
    PyObject_HEAD
    PyObject *single;   /* {keyword: (scope for False, scope for True)} */
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
        if (value == Py_True || value == Py_False) {
            PyObject *keyword = PyTuple_GET_ITEM(kwnames, 0);
            /* an exact str only: a str subclass's own __eq__/__hash__ never run here */
            PyObject *pair = PyUnicode_CheckExact(keyword) ? PyDict_GetItemWithError(self->single, keyword) : NULL;
            if (pair != NULL && PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2) {
                PyObject *scope = PyTuple_GET_ITEM(pair, value == Py_True ? 1 : 0);
                Py_INCREF(scope);
                return scope;
            }
            if (PyErr_Occurred()) {
                return NULL;
            }
        }
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static int
fastflags_init(PyObject *op, PyObject *args, PyObject *kwargs)
{
    FastFlags *self = (FastFlags *)op;
    static char *keywords[] = {"single", "fallback", NULL};
    PyObject *single, *fallback;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O:FastFlags", keywords, &PyDict_Type, &single, &fallback)) {
        return -1;
    }
    Py_INCREF(single);
    Py_XSETREF(self->single, single);
    Py_INCREF(fallback);
    Py_XSETREF(self->fallback, fallback);
    self->vectorcall = fastflags_vectorcall;
    return 0;
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

static int
fastflags_traverse(PyObject *op, visitproc visit, void *arg)
{
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
    PyObject_GC_UnTrack(op);
    if (((FastFlags *)op)->weakreflist != NULL) {
        PyObject_ClearWeakRefs(op);
    }
    fastflags_clear(op);
    Py_TYPE(op)->tp_free(op);
}

static PyObject *
fastflags_repr(PyObject *op)
{
    return PyObject_Repr(((FastFlags *)op)->fallback);
}

static PyTypeObject FastFlagsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "backends._engine._speedups.FastFlags",
    .tp_basicsize = sizeof(FastFlags),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(FastFlags, vectorcall),
    .tp_call = fastflags_call,
    .tp_new = PyType_GenericNew,
    .tp_init = fastflags_init,
    .tp_getattro = fastflags_getattro,
    .tp_setattro = fastflags_setattro,
    .tp_descr_get = fastflags_descr_get,
    .tp_weaklistoffset = offsetof(FastFlags, weakreflist),
    .tp_methods = fastflags_methods,
    .tp_getset = fastflags_getset,
    .tp_repr = fastflags_repr,
    .tp_traverse = fastflags_traverse,
    .tp_clear = fastflags_clear,
    .tp_dealloc = fastflags_dealloc,
};

/* -- module ------------------------------------------------------------------------------ */

static PyObject *
configure(PyObject *module, PyObject *args)
{
    PyObject *var, *empty, *namespace, *entry;
    if (!PyArg_ParseTuple(args, "O!O!O!O:configure", &PyContextVar_Type, &var, &PyDict_Type, &empty, &PyDict_Type,
                          &namespace, &entry)) {
        return NULL;
    }
    Py_XSETREF(overrides_var, Py_NewRef(var));
    Py_XSETREF(no_scope, Py_NewRef(empty));
    Py_XSETREF(state_dict, Py_NewRef(namespace));
    Py_XSETREF(entry_key, Py_NewRef(entry));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(overrides, NO_SCOPE, vars(state), ENTRY): the engine's ContextVar, its default, "
     "the state module's namespace and the entry key."},
    {NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "backends._engine._speedups",
    .m_doc = "The compiled path of the engine's flag reads and scope entry and exit (see the C source).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    ScopeCoreType.tp_new = PyBaseObject_Type.tp_new;
    if (PyType_Ready(&FlagDescriptorType) < 0 || PyType_Ready(&ScopeCoreType) < 0 ||
        PyType_Ready(&FastFlagsType) < 0) {
        return NULL;
    }
    str_exit_slow = PyUnicode_InternFromString("_exit_slow");
    str_enter_slow = PyUnicode_InternFromString("_enter_slow");
    str_published = PyUnicode_InternFromString("published");
    if (str_exit_slow == NULL || str_enter_slow == NULL || str_published == NULL) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&FlagDescriptorType);
    Py_INCREF(&ScopeCoreType);
    if (PyModule_AddObject(module, "FlagDescriptor", (PyObject *)&FlagDescriptorType) < 0 ||
        PyModule_AddObject(module, "ScopeCore", (PyObject *)&ScopeCoreType) < 0 ||
        PyModule_AddObjectRef(module, "FastFlags", (PyObject *)&FastFlagsType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
