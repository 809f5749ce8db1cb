/* agglab.softswitch._fastdense: the dense (SwitchML) first-contribution path in C.
 *
 * Why native: py-spy on a software switch under `make bench ONLY=limit` at the low rate (a
 * frame per wake-up) put most of the switch's per-frame CPU in Python's per-frame pipeline
 * (Pipeline.process: parse, lookups, a dozen small numpy calls, bytes copies) and in the
 * ctypes send of the one result (docs/measurements.md, 2026-12-06 fourth session). This file
 * does what softswitch/batch.py (DenseBatch) does for a frame, one frame after another, with
 * exactly P4's per-packet semantics (aggregate.p4 `_contribute`, first copy), and sends the
 * results with sendmmsg straight from its output arena. Everything else stays in Python.
 *
 * The contract is batch.py's: `run` takes frames in order while each is a full-size dense
 * first contribution of the context's child (same job/tree/epoch, flags of no other branch,
 * no lead, the child's bit not yet set, slot in range) and stops, touching nothing for it,
 * at the first that is not: the caller runs that one through Pipeline.process. The Python
 * pipeline is the reference; tests/test_softswitch_native.py checks bit-exact equality of
 * frames, registers and counters. All constants (K, SLOTS, offsets) come from Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "mmsg_calls.h"   /* recvmmsg */

#define NPORTS 512
#define DROP_PORT 511
#define MAX_DST 64           /* replicas with agg_set_dst per result, at most */

typedef struct {
    PyObject_HEAD
    Py_buffer reg[7];        /* values u32, bitmap u32, count u8, exp u8, final u8, block u32, rnext u32 */
    Py_buffer st_pk, st_by;  /* agg_stats packets, bytes (u64) */
    Py_buffer rearm[5];      /* sparse registers zeroed at r and o on completion (SparseRearm) */
    Py_buffer next_cells;    /* sp_next (u32): the slot's MAX_WORKERS cells zeroed too */
    int nbuf;                /* how many Py_buffers above are held (for dealloc) */
    long K, SLOTS, MAXW, FRAME, AGG, UDP_PORT, FLAG_LEAD, FLAG_RESULT, ST_CONTRIB, ST_COMPLETE;
    int fds[NPORTS];         /* egress port -> socket, -1: none (outputs kept for take()) */
    unsigned char *out;      /* output arena: out_cap frames of FRAME bytes */
    short *out_port;
    long out_cap, m;         /* capacity, frames staged */
} Engine;

#define U32(b) ((uint32_t *)(b).buf)
#define U8(b) ((uint8_t *)(b).buf)

static uint32_t be32(const unsigned char *p) { return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]; }
static void put32(unsigned char *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }

/* deparser.ipv4_checksum: one's complement of the 20-byte header's words but the checksum */
static void ipv4_csum(unsigned char *f) {
    const unsigned char *ip = f + 14;
    uint32_t s = 0;
    for (int i = 0; i < 20; i += 2)
        if (i != 10) s += (uint32_t)ip[i] << 8 | ip[i + 1];
    s = (s & 0xFFFF) + (s >> 16);
    s = (s & 0xFFFF) + (s >> 16);
    s = ~s & 0xFFFF;
    f[24] = s >> 8; f[25] = s & 0xFF;
}

static void Engine_dealloc(Engine *self) {
    Py_buffer *all[] = {&self->reg[0], &self->reg[1], &self->reg[2], &self->reg[3], &self->reg[4],
                        &self->reg[5], &self->reg[6], &self->st_pk, &self->st_by, &self->rearm[0],
                        &self->rearm[1], &self->rearm[2], &self->rearm[3], &self->rearm[4], &self->next_cells};
    for (int i = 0; i < self->nbuf; i++) PyBuffer_Release(all[i]);
    PyMem_Free(self->out);
    PyMem_Free(self->out_port);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Engine(registers: 7-tuple, stats: 2-tuple, rearm: 5-tuple, next_cells, consts: 10-tuple, out_cap) */
static int Engine_init(Engine *self, PyObject *args, PyObject *kw) {
    PyObject *regs, *stats, *rearm, *next_cells, *consts;
    long cap;
    if (!PyArg_ParseTuple(args, "O!O!O!OO!l", &PyTuple_Type, &regs, &PyTuple_Type, &stats, &PyTuple_Type,
                          &rearm, &next_cells, &PyTuple_Type, &consts, &cap))
        return -1;
    if (PyTuple_GET_SIZE(regs) != 7 || PyTuple_GET_SIZE(stats) != 2 || PyTuple_GET_SIZE(rearm) != 5 ||
        PyTuple_GET_SIZE(consts) != 10 || cap < 1) {
        PyErr_SetString(PyExc_ValueError, "Engine: 7 registers, 2 stats, 5 rearm arrays, 10 constants, out_cap >= 1");
        return -1;
    }
    PyObject *objs[15];
    Py_buffer *dst[15] = {&self->reg[0], &self->reg[1], &self->reg[2], &self->reg[3], &self->reg[4],
                          &self->reg[5], &self->reg[6], &self->st_pk, &self->st_by, &self->rearm[0],
                          &self->rearm[1], &self->rearm[2], &self->rearm[3], &self->rearm[4], &self->next_cells};
    for (int i = 0; i < 7; i++) objs[i] = PyTuple_GET_ITEM(regs, i);
    for (int i = 0; i < 2; i++) objs[7 + i] = PyTuple_GET_ITEM(stats, i);
    for (int i = 0; i < 5; i++) objs[9 + i] = PyTuple_GET_ITEM(rearm, i);
    objs[14] = next_cells;
    for (int i = 0; i < 15; i++) {      /* the numpy arrays themselves: writable, contiguous */
        if (PyObject_GetBuffer(objs[i], dst[i], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            return -1;
        self->nbuf = i + 1;
    }
    long *c[10] = {&self->K, &self->SLOTS, &self->MAXW, &self->FRAME, &self->AGG, &self->UDP_PORT,
                   &self->FLAG_LEAD, &self->FLAG_RESULT, &self->ST_CONTRIB, &self->ST_COMPLETE};
    for (int i = 0; i < 10; i++)
        if ((*c[i] = PyLong_AsLong(PyTuple_GET_ITEM(consts, i))) == -1 && PyErr_Occurred()) return -1;
    if (self->reg[0].len != 2 * self->SLOTS * self->K * 4 || self->reg[1].itemsize != 4 ||
        self->reg[2].itemsize != 1 || self->reg[3].itemsize != 1 || self->reg[4].itemsize != 1 ||
        self->reg[5].itemsize != 4 || self->reg[6].itemsize != 4 || self->st_pk.itemsize != 8 ||
        self->st_by.itemsize != 8 || self->next_cells.itemsize != 4) {
        PyErr_SetString(PyExc_ValueError, "Engine: register sizes or widths do not match the constants");
        return -1;
    }
    self->out_cap = cap;
    self->out = PyMem_Malloc(cap * self->FRAME);
    self->out_port = PyMem_Malloc(cap * sizeof(short));
    if (!self->out || !self->out_port) { PyErr_NoMemory(); return -1; }
    for (int i = 0; i < NPORTS; i++) self->fds[i] = -1;
    return 0;
}

static void zero_at(Py_buffer *b, long i) { memset((char *)b->buf + i * b->itemsize, 0, b->itemsize); }

/* run(rows, stride, lens, start, n, ctx) -> (frames taken from `start` on, drops among them);
 * 0 taken: frame `start` is the caller's. rows: the receive arena (frame i at i * stride),
 * lens: uint32 msg_len of each frame, any stride (MsgBatch.received).
 * ctx: (job, tree, epoch, other_flags, child, fan_in, parent, slot_base, slots, want, dsts):
 * parent < 0 at the root, want < 0 for any worker; dsts: bytes, DST_REC per replica keeping
 * the result (agg_set_dst), in replication order: port (u16 big-endian), dmac+smac (12),
 * sip+dip (8). */
#define DST_REC 22
static PyObject *Engine_run(Engine *self, PyObject *args) {
    Py_buffer rows, lens;
    Py_ssize_t start, n, stride;
    long job, tree, epoch, other, child, fan_in, parent, slot_base, slots, want;
    const unsigned char *dsts;
    Py_ssize_t dlen;
    PyObject *lens_obj;
    if (!PyArg_ParseTuple(args, "y*nOnn(lllllllllly#)", &rows, &stride, &lens_obj, &start, &n, &job, &tree, &epoch,
                          &other, &child, &fan_in, &parent, &slot_base, &slots, &want, &dsts, &dlen))
        return NULL;
    if (PyObject_GetBuffer(lens_obj, &lens, PyBUF_STRIDES | PyBUF_FORMAT) < 0) { PyBuffer_Release(&rows); return NULL; }
    Py_ssize_t nrows = lens.ndim == 1 ? lens.shape[0] : 0, lstride = lens.ndim == 1 ? lens.strides[0] : 0;
    if (stride > 0 && rows.len / stride < nrows) nrows = rows.len / stride;
    long K = self->K, SLOTS = self->SLOTS, FRAME = self->FRAME, A = self->AGG;
    long ndst = dlen / DST_REC, need = parent >= 0 ? 1 : ndst;
    long lim = slots < SLOTS - slot_base ? slots : SLOTS - slot_base;
    uint32_t bit = (uint32_t)1 << child, *values = U32(self->reg[0]), *bitmap = U32(self->reg[1]);
    uint8_t *count = U8(self->reg[2]), *exp = U8(self->reg[3]), *final = U8(self->reg[4]);
    uint32_t *block = U32(self->reg[5]), *rnext = U32(self->reg[6]);
    uint64_t *pk = (uint64_t *)self->st_pk.buf, *by = (uint64_t *)self->st_by.buf;
    long ip_len = FRAME - 14, udp_len = FRAME - 34, drops = 0;
    Py_ssize_t i = start;
    if (lens.itemsize != 4 || stride <= 0 || dlen % DST_REC || ndst > MAX_DST || child < 0 || child >= self->MAXW) {
        PyErr_SetString(PyExc_ValueError, "run: bad lens, dsts or child");
        goto fail;
    }
    for (; i < n && i < nrows; i++) {
        const unsigned char *f = (const unsigned char *)rows.buf + i * stride;
        uint32_t len = *(const uint32_t *)((const char *)lens.buf + i * lstride);
        /* ---- what batch.py checks, per frame: else the frame is the caller's */
        if (len != FRAME || stride < FRAME || f[12] != 0x08 || f[13] != 0 || f[16] != ip_len >> 8 ||
            f[17] != (ip_len & 0xFF) || f[23] != 17 || f[36] != self->UDP_PORT >> 8 ||
            f[37] != (self->UDP_PORT & 0xFF) || f[38] != udp_len >> 8 || f[39] != (udp_len & 0xFF) ||
            f[A] != job || f[A + 1] != tree || f[A + 2] != epoch || (f[14] & 0x0F) != 5 ||
            (f[A + 3] & other) || (f[A + 3] & self->FLAG_LEAD))
            break;
        if (want >= 0 && f[A + 6] != want) break;       /* batch.py compares the one byte */
        unsigned vs = f[A + 4] << 8 | f[A + 5];
        long slot = vs & 0x7FFF;
        if (slot >= lim) break;
        if (self->m + need > self->out_cap) break;            /* no room for its outputs: flush first */
        long idx = slot + slot_base, ver = vs >> 15;
        long r = idx + SLOTS * ver, o = idx + SLOTS * (1 - ver);
        uint32_t bm = bitmap[r];
        if (bm & bit) break;                                  /* a copy the child already sent */
        /* ---- aggregate.py _contribute, first copy */
        const unsigned char *pay = f + A + 16;
        uint32_t *lanes = values + r * K;
        unsigned e = f[A + 7], cnt;
        if (bm == 0) {                                        /* a round starts */
            block[r] = be32(f + A + 8);
            final[r] = 0;
        }
        bitmap[o] &= ~bit;                                    /* shadow copy: free the other version */
        if (bm == 0) {
            for (long k = 0; k < K; k++) lanes[k] = be32(pay + 4 * k);
            cnt = 1;
        } else {
            for (long k = 0; k < K; k++) lanes[k] += be32(pay + 4 * k);   /* wraps like bit<32> */
            if (exp[r] > e) e = exp[r];
            cnt = (count[r] + 1) & 0xFF;
        }
        exp[r] = e;
        count[r] = cnt;
        bitmap[r] = bm | bit;
        pk[self->ST_CONTRIB] += 1; by[self->ST_CONTRIB] += FRAME;
        if ((long)cnt != fan_in) { drops++; continue; }
        pk[self->ST_COMPLETE] += 1; by[self->ST_COMPLETE] += FRAME;
        for (int a = 0; a < 5; a++) { zero_at(&self->rearm[a], r); zero_at(&self->rearm[a], o); }
        memset(U32(self->next_cells) + (r % SLOTS) * self->MAXW, 0, self->MAXW * 4);
        rnext[r] = be32(f + A + 12);
        /* ---- the result (root) or the partial going up (inner switch) */
        unsigned char *res = self->out + self->m * FRAME;
        memcpy(res, f, A + 16);
        for (long k = 0; k < K; k++) put32(res + A + 16 + 4 * k, lanes[k]);
        memcpy(res + A + 16 + 4 * K, f + A + 16 + 4 * K, FRAME - (A + 16 + 4 * K));
        res[A + 7] = e;
        res[40] = res[41] = 0;                                /* UDP checksum */
        if (parent >= 0) {
            res[A + 3] &= ~self->FLAG_RESULT;
            if (parent == DROP_PORT) { drops++; continue; }
            ipv4_csum(res);
            self->out_port[self->m++] = parent;
            continue;
        }
        final[r] = 1;
        res[A + 3] |= self->FLAG_RESULT;
        if (ndst == 0) { drops++; continue; }
        for (long d = ndst - 1; d >= 0; d--) {               /* replicas after the first: copies */
            const unsigned char *rec = dsts + d * DST_REC;
            unsigned char *o_f = self->out + (self->m + d) * FRAME;
            if (d) memcpy(o_f, res, FRAME);
            memcpy(o_f, rec + 2, 12);
            memcpy(o_f + 26, rec + 14, 8);
            ipv4_csum(o_f);
            self->out_port[self->m + d] = rec[0] << 8 | rec[1];
        }
        self->m += ndst;
    }
    PyBuffer_Release(&rows);
    PyBuffer_Release(&lens);
    return Py_BuildValue("nl", i - start, drops);
fail:
    PyBuffer_Release(&rows);
    PyBuffer_Release(&lens);
    return NULL;
}

/* set_fd(port, fd): where `send` sends port's outputs (-1: keep them for take()) */
static PyObject *Engine_set_fd(Engine *self, PyObject *args) {
    int port, fd;
    if (!PyArg_ParseTuple(args, "ii", &port, &fd)) return NULL;
    if (port < 0 || port >= NPORTS) { PyErr_SetString(PyExc_ValueError, "port out of range"); return NULL; }
    self->fds[port] = fd;
    Py_RETURN_NONE;
}

/* send() -> [(port, sent, dropped, errno)]: every staged output with one sendmmsg per port
 * (in staging order within a port); a frame the kernel refuses is dropped and the rest go on,
 * as daemon_frames._send_staged does. Ports without a socket keep nothing (counted in `sent` 0,
 * dropped all, errno -1: the daemon's "no such port"). */
static PyObject *Engine_send(Engine *self, PyObject *unused) {
    PyObject *res = PyList_New(0);
    if (!res) return NULL;
    if (!self->m) return res;
    struct mmsghdr *hdr = PyMem_Calloc(self->m, sizeof *hdr);
    struct iovec *iov = PyMem_Calloc(self->m, sizeof *iov);
    char *done = PyMem_Calloc(self->m, 1);
    if (!hdr || !iov || !done) { PyMem_Free(hdr); PyMem_Free(iov); PyMem_Free(done); Py_DECREF(res); return PyErr_NoMemory(); }
    for (long i = 0; i < self->m; i++) {
        if (done[i]) continue;
        int port = self->out_port[i], fd = self->fds[port], k = 0, sent = 0, dropped = 0, err = 0;
        for (long j = i; j < self->m; j++)                   /* this port's frames, in order */
            if (!done[j] && self->out_port[j] == port) {
                done[j] = 1;
                iov[k].iov_base = self->out + j * self->FRAME;
                iov[k].iov_len = self->FRAME;
                hdr[k].msg_hdr.msg_iov = &iov[k];
                hdr[k].msg_hdr.msg_iovlen = 1;
                k++;
            }
        if (fd < 0) { dropped = k; err = -1; }
        else
            for (int pos = 0; pos < k;) {               /* as daemon_frames._send_staged */
                int got = sendmmsg(fd, hdr + pos, k - pos, MSG_DONTWAIT);
                if (got > 0) { sent += got; pos += got; }
                if (pos < k) {                          /* frame `pos` was refused */
                    err = got < 0 ? errno : ENOBUFS;
                    dropped++;
                    pos++;
                }
            }
        PyObject *t = Py_BuildValue("(iiii)", port, sent, dropped, err);
        if (!t || PyList_Append(res, t) < 0) { Py_XDECREF(t); Py_DECREF(res); res = NULL; break; }
        Py_DECREF(t);
    }
    PyMem_Free(hdr); PyMem_Free(iov); PyMem_Free(done);
    self->m = 0;
    return res;
}

/* take() -> [(port, bytes)]: the staged outputs in staging order, then none (tests) */
static PyObject *Engine_take(Engine *self, PyObject *unused) {
    PyObject *res = PyList_New(self->m);
    if (!res) return NULL;
    for (long i = 0; i < self->m; i++) {
        PyObject *t = Py_BuildValue("(iy#)", self->out_port[i], self->out + i * self->FRAME, (Py_ssize_t)self->FRAME);
        if (!t) { Py_DECREF(res); return NULL; }
        PyList_SET_ITEM(res, i, t);
    }
    self->m = 0;
    return res;
}

static PyObject *Engine_staged(Engine *self, void *closure) { return PyLong_FromLong(self->m); }

static PyMethodDef module_methods[] = {
    {"recvmmsg", fast_recvmmsg, METH_VARARGS, "recvmmsg(fd, hdr_address, count) -> n"}, {NULL}};

static PyMethodDef Engine_methods[] = {
    {"run", (PyCFunction)Engine_run, METH_VARARGS, "run(rows, lens, start, n, ctx) -> (taken, drops)"},
    {"set_fd", (PyCFunction)Engine_set_fd, METH_VARARGS, "set_fd(port, fd)"},
    {"send", (PyCFunction)Engine_send, METH_NOARGS, "send() -> [(port, sent, dropped, errno)]"},
    {"take", (PyCFunction)Engine_take, METH_NOARGS, "take() -> [(port, frame)]"},
    {NULL}};
static PyGetSetDef Engine_getset[] = {{"staged", (getter)Engine_staged, NULL, "outputs waiting", NULL}, {NULL}};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "agglab.softswitch._fastdense.Engine",
    .tp_basicsize = sizeof(Engine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The dense first-contribution path over a pipeline's registers (see the module doc).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Engine_init,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_methods = Engine_methods,
    .tp_getset = Engine_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastdense", "The dense fast path in C (fastdense.c).", -1, module_methods};

PyMODINIT_FUNC PyInit__fastdense(void) {
    if (PyType_Ready(&EngineType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&EngineType);
    if (PyModule_AddObject(m, "Engine", (PyObject *)&EngineType) < 0) { Py_DECREF(&EngineType); Py_DECREF(m); return NULL; }
    return m;
}
