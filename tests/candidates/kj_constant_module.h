/* KJ_CONSTANT_MODULE(function, value): the extension's Python module (TORCH_EXTENSION_NAME, as torch names it)
   with one function, function() -> value, in Python's C API alone. It compiles in a fraction of a second where
   pybind11's headers take ~4 s and torch's ~20 s: for the test candidates whose point is a build, not its speed
   (the cache's lock, the sandbox's build, torch's load_inline/load naming). Their include path names this folder. */
#include <Python.h>

#define KJ_JOIN_(a, b) a##b
#define KJ_JOIN(a, b) KJ_JOIN_(a, b)
#define KJ_TEXT_(a) #a
#define KJ_TEXT(a) KJ_TEXT_(a)

#define KJ_CONSTANT_MODULE(function, value)                                                                       \
    static PyObject* function(PyObject*, PyObject*) { return PyLong_FromLong(value); }                            \
    static PyMethodDef kj_methods[] = {{KJ_TEXT(function), function, METH_NOARGS, nullptr},                       \
                                       {nullptr, nullptr, 0, nullptr}};                                           \
    static PyModuleDef kj_module = {PyModuleDef_HEAD_INIT, KJ_TEXT(TORCH_EXTENSION_NAME), nullptr, -1, kj_methods}; \
    PyMODINIT_FUNC KJ_JOIN(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&kj_module); }
