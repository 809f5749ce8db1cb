/* MsgBatch's sendmmsg/recvmmsg without ctypes, shared by the switch's and the agents' C
 * paths (softswitch/fastdense.c, hosts/fastagent.c): ctypes' argument conversion cost more
 * than the call itself at a frame per wake-up.
 * sendmmsg(fd, hdr_address, count) -> sent, or -errno when the first was refused;
 * recvmmsg(fd, hdr_address, count) -> received, 0 when none waits. hdr_address: a MsgBatch's
 * prepared mmsghdr array (MsgBatch._hdr_at, plus 64 bytes per message skipped). */
#ifndef AGGLAB_MMSG_CALLS_H
#define AGGLAB_MMSG_CALLS_H
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>

static inline PyObject *fast_sendmmsg(PyObject *mod, PyObject *args) {
    int fd;
    unsigned long long at;
    unsigned count;
    if (!PyArg_ParseTuple(args, "iKI", &fd, &at, &count)) return NULL;
    int n = sendmmsg(fd, (struct mmsghdr *)(uintptr_t)at, count, MSG_DONTWAIT);
    return PyLong_FromLong(n < 0 ? -errno : n);
}

static inline PyObject *fast_recvmmsg(PyObject *mod, PyObject *args) {
    int fd;
    unsigned long long at;
    unsigned count;
    if (!PyArg_ParseTuple(args, "iKI", &fd, &at, &count)) return NULL;
    int n = recvmmsg(fd, (struct mmsghdr *)(uintptr_t)at, count, MSG_DONTWAIT, NULL);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return PyLong_FromLong(0);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLong(n);
}
#endif
