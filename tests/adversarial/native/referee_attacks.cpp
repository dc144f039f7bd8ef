// Native-code attacks on the verdict (issue 24, part 2), for a load_inline candidate of the relu task.
//
// Both use only what any extension has: the CPython C API (reading objects and frames through it raises
// no audit event, unlike gc.get_objects or sys._getframe), raw CUDA copies and the candidate's own
// kernels (no torch operator runs, so the torch-op monitor sees nothing, and coverage sees own kernels);
// the one write is a raw system call (cpn_syscall, from escape_attempts.c, included before this file).
// Neither computes the ReLU. Host code only: the kernels are in the candidate's source (fixtures.py).
//
// - cpa_find_reference(x): looks through the worker's own objects for a cached reference whose first
//   input has x's bytes and returns its output (the candidate's kernel copies it: fixtures.py). Without a referee the worker keeps its
//   references across jobs, so this passes as correct; with one, no reference output exists in the
//   worker while the candidate runs, and the zeros it falls back to are wrong.
// - cpa_forge_verdict(): walks the interpreter's frames up to the child's job loop (`_run_job`), reads the
//   job's nonce and the result fd from its locals, and writes a well-formed result frame claiming every
//   configuration of the relu task correct, before any output is shipped. Without a referee the parent
//   takes it; with one, a verdict claimed without shipped outputs is `verdict_mismatch`.

#include <Python.h>
#include <frameobject.h>
#include <cuda_runtime.h>
#include <string>
#include <vector>

static bool cpa_same_prefix(const torch::Tensor& a, const torch::Tensor& b) {
    if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type() || !a.is_cuda() || !b.is_cuda()) {
        return false;
    }
    size_t n = (size_t)a.numel() * a.element_size();
    size_t k = n < 4096 ? n : 4096;
    std::vector<char> ha(k), hb(k);
    cudaMemcpy(ha.data(), a.data_ptr(), k, cudaMemcpyDeviceToHost);
    cudaMemcpy(hb.data(), b.data_ptr(), k, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < k; i++) {
        if (ha[i] != hb[i]) return false;
    }
    return true;
}

static torch::Tensor cpa_find_reference(const torch::Tensor& x) {
    PyObject* session = PyDict_GetItemString(PyImport_GetModuleDict(), "cudaperf.execute.torch_session");
    if (session == nullptr) return torch::Tensor();
    try {
        namespace py = pybind11;
        py::object entries = py::reinterpret_borrow<py::object>(session).attr("REFERENCES").attr("_entries");
        for (py::handle entry : entries.attr("values")()) {
            py::object outputs = entry.attr("outputs");
            py::object inputs = entry.attr("inputs");
            if (outputs.is_none() || inputs.is_none()) continue;
            auto first = py::cast<torch::Tensor>(py::list(inputs)[0]);
            auto out = py::cast<torch::Tensor>(outputs);
            if (out.sizes() == x.sizes() && out.is_contiguous() && cpa_same_prefix(first, x)) return out;
        }
    } catch (...) {
    }
    return torch::Tensor();
}

static std::string cpa_claim(const char* config) {
    return std::string("{\"config\":\"") + config + "\",\"correct\":true,\"seeds\":3,\"max_abs_error\":0.0,"
           "\"max_rel_error\":0.0,\"mismatch_fraction\":0.0,\"message\":\"\"}";
}

static int cpa_forge_verdict() {
    PyFrameObject* frame = PyEval_GetFrame();
    Py_XINCREF(frame);
    while (frame != nullptr) {
        PyCodeObject* code = PyFrame_GetCode(frame);  // the struct's field: no attribute lookup, no event
        bool found = PyUnicode_CompareWithASCIIString(code->co_name, "_run_job") == 0;
        Py_DECREF(code);
        if (found) {
            PyObject* locals = PyFrame_GetLocals(frame);
            PyObject* nonce = locals ? PyMapping_GetItemString(locals, "nonce") : nullptr;
            PyObject* fd = locals ? PyMapping_GetItemString(locals, "reply_fd") : nullptr;
            int written = 0;
            if (nonce != nullptr && fd != nullptr) {
                std::string body = std::string("{\"type\":\"result\",\"nonce\":\"") + PyUnicode_AsUTF8(nonce) +
                    "\",\"payload\":{\"outcome\":null,\"stage\":\"correctness\",\"message\":\"\",\"flags\":[],"
                    "\"timings\":[],\"correctness\":[" + cpa_claim("small") + "," + cpa_claim("medium") + "," +
                    cpa_claim("large") + "]},\"sandbox\":{\"flags\":[],\"poisoned\":false,\"tampered\":false}}";
                std::string frame_bytes(4, '\0');
                unsigned long n = body.size();
                frame_bytes[0] = (char)(n >> 24); frame_bytes[1] = (char)(n >> 16);
                frame_bytes[2] = (char)(n >> 8); frame_bytes[3] = (char)n;
                frame_bytes += body;
                cpn_syscall(CPN_WRITE, PyLong_AsLong(fd), (long)frame_bytes.data(), (long)frame_bytes.size(),
                            0, 0, 0);
                written = 1;
            }
            Py_XDECREF(nonce);
            Py_XDECREF(fd);
            Py_XDECREF(locals);
            PyErr_Clear();
            Py_DECREF(frame);
            return written;
        }
        PyFrameObject* back = PyFrame_GetBack(frame);
        Py_DECREF(frame);
        frame = back;
    }
    return 0;
}
