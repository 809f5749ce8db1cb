/* agglab.hosts._fastagent: the dense int32 agent's per-result work in C.
 *
 * Why native: py-spy on the agent of `make bench ONLY=limit` at the low rate (window 1, a
 * result per wake-up) put about 60% of the agent's on-CPU samples in Python: DenseRun.on_batch
 * (header reads, the per-result checks, one numpy fancy-index store of the lanes), send_round
 * (packing the next header, slicing the body, the timer bookkeeping) and the ctypes calls
 * around sendmmsg/recvmmsg (docs/measurements.md, 2026-12-06 fifth session). This file does
 * exactly what hosts/agent.py DenseRun.on_batch and send_round do for an int32 run's results
 * and data rounds, on the same Python lists (so the timers, resends, control polls and the
 * loop in hosts/slots.py stay Python and see the same state). The Python code is the
 * reference: tests/test_agent_native.py feeds both the same result streams and compares the
 * packets sent and every piece of per-slot state, bit-exact.
 *
 * Layout: the agg_h struct (word sizes) and each field's (word, shift, mask) come from Python
 * (hosts/protocol.py LAYOUT, from the P4 header), so this file holds no protocol constant.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "mmsg_calls.h"   /* sendmmsg, recvmmsg */

#define MAXWORDS 16
enum { I_JOB, I_FLAGS, I_VER, I_SLOT, I_WORKER, I_EXP, I_BLOCK, NIN };          /* fields read */
enum { O_TREE, O_EPOCH, O_VER, O_SLOT, O_EXP, O_BLOCK, O_NEXT, NOUT };          /* fields packed */

typedef struct { int word, shift; uint64_t mask; } Field;

typedef struct {
    PyObject_HEAD
    PyObject *run;                       /* the DenseRun: epoch, trees, depart, rtt.rto per call */
    PyObject *round, *rounds, *v0, *sent_at, *last_sent, *tries, *agreed, *deadline, *packet;
    PyObject *send;                      /* the transport's send(payload) */
    PyObject *raw;                       /* the array's bytes as sent (bytes) */
    Py_buffer sums;                      /* int32 (nblocks, K), writable */
    int have_sums;
    int nwords, wsize[MAXWORDS], woff[MAXWORDS], hdr;
    uint64_t base[MAXWORDS];             /* the packer's fixed words (job, worker, flags 0) */
    Field in[NIN], out[NOUT];
    long job, S, nblocks, rank, K, payload, flag_result, flag_retx, next_none;
    double frame_time;
} Core;

static uint64_t get_be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

static void put_be(unsigned char *p, int n, uint64_t v) {
    for (int i = n - 1; i >= 0; i--) { p[i] = v & 0xFF; v >>= 8; }
}

static long field(const Core *c, const unsigned char *h, int f) {
    const Field *d = &c->in[f];
    return (long)((get_be(h + c->woff[d->word], c->wsize[d->word]) >> d->shift) & d->mask);
}

static long lget(PyObject *list, Py_ssize_t i) { return PyLong_AsLong(PyList_GET_ITEM(list, i)); }
static double fget(PyObject *list, Py_ssize_t i) { return PyFloat_AsDouble(PyList_GET_ITEM(list, i)); }
static int lset(PyObject *list, Py_ssize_t i, PyObject *v) { return v ? PyList_SetItem(list, i, v) : -1; }
static int append_float(PyObject *list, double v) {
    PyObject *o = PyFloat_FromDouble(v);
    int r = o ? PyList_Append(list, o) : -1;
    Py_XDECREF(o);
    return r;
}

static int read_fields(PyObject *seq, Field *out, int n) {
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != n) {
        PyErr_SetString(PyExc_ValueError, "Core: a field tuple of the wrong size");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        unsigned long long mask;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(seq, i), "iiK", &out[i].word, &out[i].shift, &mask)) return -1;
        out[i].mask = mask;
    }
    return 0;
}

static void Core_dealloc(Core *self) {
    Py_XDECREF(self->run); Py_XDECREF(self->round); Py_XDECREF(self->rounds); Py_XDECREF(self->v0);
    Py_XDECREF(self->sent_at); Py_XDECREF(self->last_sent); Py_XDECREF(self->tries); Py_XDECREF(self->agreed);
    Py_XDECREF(self->deadline); Py_XDECREF(self->packet); Py_XDECREF(self->send); Py_XDECREF(self->raw);
    if (self->have_sums) PyBuffer_Release(&self->sums);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Core(run, lists: 9-tuple, send, raw, sums, words: sizes tuple, base: tuple, in: 7 fields,
 *      out: 7 fields, consts: (job, S, nblocks, rank, K, payload, RESULT, RETX, NEXT_NONE), frame_time) */
static int Core_init(Core *self, PyObject *args, PyObject *kw) {
    PyObject *run, *lists, *send, *raw, *sums, *words, *base, *in, *out, *consts;
    double frame_time;
    if (!PyArg_ParseTuple(args, "OO!OSOO!O!OOO!d", &run, &PyTuple_Type, &lists, &send, &raw, &sums,
                          &PyTuple_Type, &words, &PyTuple_Type, &base, &in, &out, &PyTuple_Type, &consts,
                          &frame_time))
        return -1;
    if (PyTuple_GET_SIZE(lists) != 9 || PyTuple_GET_SIZE(words) > MAXWORDS ||
        PyTuple_GET_SIZE(base) != PyTuple_GET_SIZE(words)) {
        PyErr_SetString(PyExc_ValueError, "Core: 9 lists, as many base words as word sizes (at most 16)");
        return -1;
    }
    PyObject **slots[] = {&self->round, &self->rounds, &self->v0, &self->sent_at, &self->last_sent,
                          &self->tries, &self->agreed, &self->deadline, &self->packet};
    for (int i = 0; i < 9; i++) {
        PyObject *l = PyTuple_GET_ITEM(lists, i);
        if (!PyList_Check(l)) { PyErr_SetString(PyExc_TypeError, "Core: per-slot state must be lists"); return -1; }
        Py_INCREF(l);
        Py_XSETREF(*slots[i], l);
    }
    Py_INCREF(run); Py_XSETREF(self->run, run);
    Py_INCREF(send); Py_XSETREF(self->send, send);
    Py_INCREF(raw); Py_XSETREF(self->raw, raw);
    if (self->have_sums) { PyBuffer_Release(&self->sums); self->have_sums = 0; }
    if (PyObject_GetBuffer(sums, &self->sums, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return -1;
    self->have_sums = 1;
    self->nwords = (int)PyTuple_GET_SIZE(words);
    self->hdr = 0;
    for (int i = 0; i < self->nwords; i++) {
        self->wsize[i] = (int)PyLong_AsLong(PyTuple_GET_ITEM(words, i));
        self->woff[i] = self->hdr;
        self->hdr += self->wsize[i];
        self->base[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(base, i));
    }
    if (PyErr_Occurred() || read_fields(in, self->in, NIN) < 0 || read_fields(out, self->out, NOUT) < 0) return -1;
    if (!PyArg_ParseTuple(consts, "lllllllll", &self->job, &self->S, &self->nblocks, &self->rank, &self->K,
                          &self->payload, &self->flag_result, &self->flag_retx, &self->next_none))
        return -1;
    if (self->sums.len < (Py_ssize_t)(self->nblocks * self->K * 4) ||
        PyBytes_GET_SIZE(raw) < self->nblocks * self->K * 4 || self->payload != self->hdr + 4 * self->K) {
        PyErr_SetString(PyExc_ValueError, "Core: sums, raw or the payload size do not match nblocks x K");
        return -1;
    }
    self->frame_time = frame_time;
    return 0;
}

/* accept(rows, lens, now) -> (advanced, rtts, rows_in, lead_row, foreign, duplicates)
 * DenseRun.on_batch's loop: which results are accepted (at most one per slot), their lanes
 * into the sums, each slot's round and agreed exponent; the Python caller does the rest. */
static PyObject *Core_accept(Core *c, PyObject *args) {
    PyObject *rows_o, *lens_o;
    double now;
    if (!PyArg_ParseTuple(args, "OOd", &rows_o, &lens_o, &now)) return NULL;
    Py_buffer rows, lens;
    if (PyObject_GetBuffer(rows_o, &rows, PyBUF_STRIDES) < 0) return NULL;
    if (PyObject_GetBuffer(lens_o, &lens, PyBUF_STRIDES | PyBUF_FORMAT) < 0) { PyBuffer_Release(&rows); return NULL; }
    PyObject *advanced = PyList_New(0), *rtts = PyList_New(0), *ret = NULL;
    long foreign = 0, dups = 0, rows_in = 0, lead = -1;
    if (!advanced || !rtts) goto done;
    if (rows.ndim != 2 || rows.itemsize != 1 || lens.ndim != 1 || lens.shape[0] > rows.shape[0] ||
        (lens.itemsize != 4 && lens.itemsize != 8)) {
        PyErr_SetString(PyExc_ValueError, "accept: rows (n, width) uint8 and n lengths of 4 or 8 bytes");
        goto done;
    }
    char lf = lens.format ? lens.format[strlen(lens.format) - 1] : 'B';
    int lsigned = lf == 'i' || lf == 'l' || lf == 'q';
    int32_t *sums = (int32_t *)c->sums.buf;
    for (Py_ssize_t i = 0; i < lens.shape[0]; i++) {
        const char *lp = (const char *)lens.buf + i * lens.strides[0];
        long long size = lens.itemsize == 4 ? (lsigned ? (long long)*(int32_t *)lp : (long long)*(uint32_t *)lp)
                                            : *(long long *)lp;
        const unsigned char *h = (const unsigned char *)rows.buf + i * rows.strides[0];
        if (size < c->payload || rows.shape[1] < c->payload || rows.strides[1] != 1) { foreign++; continue; }
        long flags = field(c, h, I_FLAGS), s = field(c, h, I_SLOT);
        if (!(flags & c->flag_result) || field(c, h, I_JOB) != c->job || s >= c->S) { foreign++; continue; }
        long r = lget(c->round, s);
        if (r >= lget(c->rounds, s) || field(c, h, I_VER) != ((lget(c->v0, s) + r) & 1) ||
            field(c, h, I_BLOCK) != (r == 0 ? s : s + (r - 1) * c->S)) {
            dups++;
            continue;
        }
        if (!(flags & c->flag_retx)) {
            if (append_float(rtts, now - fget(c->sent_at, s)) < 0) goto done;
        } else if (field(c, h, I_WORKER) == c->rank && lget(c->tries, s) == 1) {
            if (append_float(rtts, now - fget(c->last_sent, s)) < 0) goto done;
        }
        if (r) {
            int32_t *dst = sums + (s + (r - 1) * c->S) * c->K;
            const unsigned char *v = h + c->hdr;
            for (long k = 0; k < c->K; k++) dst[k] = (int32_t)get_be(v + 4 * k, 4);
            rows_in++;
        } else if (s == 0) {
            lead = (long)i;
        }
        if (lset(c->round, s, PyLong_FromLong(r + 1)) < 0 ||
            lset(c->agreed, s, PyLong_FromLong(field(c, h, I_EXP))) < 0)
            goto done;
        PyObject *so = PyLong_FromLong(s);
        if (!so || PyList_Append(advanced, so) < 0) { Py_XDECREF(so); goto done; }
        Py_DECREF(so);
    }
    if (PyErr_Occurred()) goto done;
    ret = Py_BuildValue("OOllll", advanced, rtts, rows_in, lead, foreign, dups);
done:
    Py_XDECREF(advanced);
    Py_XDECREF(rtts);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&lens);
    return ret;
}

static uint64_t pack_field(const Field *f, long v) { return ((uint64_t)v & f->mask) << f->shift; }

/* send_rounds(advanced, now) -> (sent, finished): DenseRun.send_round for every advanced
 * slot with rounds to go (int32 data rounds: exponent 0, the raw bytes as body), in order. */
static PyObject *Core_send_rounds(Core *c, PyObject *args) {
    PyObject *advanced;
    double now;
    if (!PyArg_ParseTuple(args, "O!d", &PyList_Type, &advanced, &now)) return NULL;
    PyObject *epoch_o = NULL, *trees = NULL, *rtt = NULL, *rto_o = NULL, *depart_o = NULL;
    long sent = 0, finished = 0, epoch;
    double rto, depart;
    PyObject *ret = NULL;
    if (!(epoch_o = PyObject_GetAttrString(c->run, "epoch")) || !(trees = PyObject_GetAttrString(c->run, "trees")) ||
        !(rtt = PyObject_GetAttrString(c->run, "rtt")) || !(rto_o = PyObject_GetAttrString(rtt, "rto")) ||
        !(depart_o = PyObject_GetAttrString(c->run, "depart")))
        goto done;
    epoch = PyLong_AsLong(epoch_o);
    rto = PyFloat_AsDouble(rto_o);
    depart = PyFloat_AsDouble(depart_o);
    if (PyErr_Occurred()) goto done;
    if (!PyList_Check(trees)) { PyErr_SetString(PyExc_TypeError, "run.trees must be a list"); goto done; }
    const char *raw = PyBytes_AS_STRING(c->raw);
    long data = 4 * c->K;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(advanced); i++) {
        long s = PyLong_AsLong(PyList_GET_ITEM(advanced, i));
        long r = lget(c->round, s);
        if (PyErr_Occurred()) goto done;
        if (r >= lget(c->rounds, s)) { finished++; continue; }
        if (r == 0) { PyErr_SetString(PyExc_ValueError, "send_rounds: a lead round is Python's"); goto done; }
        long j = s + (r - 1) * c->S, nxt = j + c->S, exp = 0, ver = (lget(c->v0, s) + r) & 1;
        if (nxt >= c->nblocks) nxt = c->next_none;
        uint64_t w[MAXWORDS];
        memcpy(w, c->base, sizeof w);
        long vals[NOUT] = {lget(trees, s), epoch, ver, s, exp, j, nxt};
        for (int f = 0; f < NOUT; f++) w[c->out[f].word] |= pack_field(&c->out[f], vals[f]);
        PyObject *payload = PyBytes_FromStringAndSize(NULL, c->payload);
        PyObject *body = PyBytes_FromStringAndSize(raw + j * data, data);
        if (!payload || !body) { Py_XDECREF(payload); Py_XDECREF(body); goto done; }
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(payload);
        for (int k = 0; k < c->nwords; k++) put_be(p + c->woff[k], c->wsize[k], w[k]);
        memcpy(p + c->hdr, raw + j * data, data);
        PyObject *pkt = Py_BuildValue("(lllllN)", ver, s, exp, j, nxt, body);
        if (!pkt || lset(c->packet, s, pkt) < 0) { Py_DECREF(payload); goto done; }
        PyObject *res = PyObject_CallOneArg(c->send, payload);
        Py_DECREF(payload);
        if (!res) goto done;
        Py_DECREF(res);
        sent++;
        double t = c->frame_time ? (now > depart ? now : depart) + c->frame_time : now;
        depart = t;
        if (lset(c->sent_at, s, PyFloat_FromDouble(t)) < 0 || lset(c->tries, s, PyLong_FromLong(0)) < 0 ||
            lset(c->deadline, s, PyFloat_FromDouble(t + rto)) < 0)
            goto done;
    }
    ret = Py_BuildValue("ll", sent, finished);
done:
    if (sent && depart_o) {                  /* what was sent is booked, also after an error */
        PyObject *d = PyFloat_FromDouble(depart);
        if (!d || PyObject_SetAttrString(c->run, "depart", d) < 0) Py_CLEAR(ret);
        Py_XDECREF(d);
    }
    Py_XDECREF(epoch_o); Py_XDECREF(trees); Py_XDECREF(rtt); Py_XDECREF(rto_o); Py_XDECREF(depart_o);
    return ret;
}

static PyMethodDef module_methods[] = {
    {"sendmmsg", fast_sendmmsg, METH_VARARGS, "sendmmsg(fd, hdr_address, count) -> sent or -errno"},
    {"recvmmsg", fast_recvmmsg, METH_VARARGS, "recvmmsg(fd, hdr_address, count) -> n"}, {NULL}};

static PyMethodDef Core_methods[] = {
    {"accept", (PyCFunction)Core_accept, METH_VARARGS,
     "accept(rows, lens, now) -> (advanced, rtts, rows_in, lead_row, foreign, duplicates)"},
    {"send_rounds", (PyCFunction)Core_send_rounds, METH_VARARGS, "send_rounds(advanced, now) -> (sent, finished)"},
    {NULL}};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "agglab.hosts._fastagent.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An int32 dense allreduce's per-result work (see the module doc).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastagent", "The dense agent's fast path in C (fastagent.c).",
                                    -1, module_methods};

PyMODINIT_FUNC PyInit__fastagent(void) {
    if (PyType_Ready(&CoreType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0) { Py_DECREF(&CoreType); Py_DECREF(m); return NULL; }
    return m;
}
