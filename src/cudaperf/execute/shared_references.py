"""One store of C reference outputs shared by the referees of a worker pool: each (task, configuration,
seed) reference is computed once per pool, not once per referee.

Why: every referee computes a C task's serial-C references (inputs drawn, the C reference run: host work)
for each configuration and seed it judges; with eight workers each referee met each task cold, and a job
waiting on its referee's references held the RL mode's GPU gate shared (H100, session 27: 23.8 s of
reference work over a 26.6 s run; dev/LOG.md).

Covers:
- `Broker` (the parent, the evaluator's process; no torch, no numpy): one thread serving one unix
  SOCK_SEQPACKET socket per referee (`RefereeLink` hands it the parent's end). Per key, the first referee
  to ask computes (`compute`), every other one asking meanwhile waits for it, later ones are served the
  entry (`hit`); a failure is never stored: the next waiter computes instead (a referee that dies while
  computing counts as a failure). Entries are sealed memfds, least recently used evicted past
  `budget_bytes`; an entry larger than the budget is not stored, and its key is then computed by each
  referee that needs it (remembered as a size, never as a value). `report()`: what was computed, served,
  waited for, evicted.
- `Client` (the referee): `fetch(key, compute)`: the entry from the store, or computed here and published
  (`publish`: the arrays copied into a memfd that is then sealed against writes, growth and shrinking, and
  mapped back read-only, so the referee keeps one copy, shared with the store). A referee that loses its
  parent computes alone.
- `shared_key`: the key, a digest of everything that determines a reference: the task id, a hash of the
  task's whole declaration (its C source, parameters, input draws, configurations), the configuration,
  and the seed with the evaluator's secret mixed in (`correctness.derive_seed`, in the referee).

Why memfds over unix sockets, and not files: a sealed memfd has no name in any file system, so a worker,
whatever its uid and mount view, cannot open it (it sees neither the parent's nor a referee's fds: they
are close-on-exec, and it runs in another pid namespace under the boundary), and once sealed nobody can
change it, not even the referee that filled it. A store in a directory would be readable by a worker
that shares the evaluator's uid (boundary off, or an evaluator that is not root). Only referees, trusted
processes of the evaluator's uid that never run candidate code, compute and publish entries; a worker has
no channel to the broker.

Not covered: PyTorch references (on the device, kept per referee: `torch_judge`), the worker's own C
references for timing (`c_session`'s caches, in the untrusted process), stores across pools or machines.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import hashlib
import json
import mmap
import os
import selectors
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_BUDGET_BYTES = 4 << 30  # as much as one referee kept of C references on its own before
MAX_MESSAGE_BYTES = 1 << 20  # a request or a layout (names, dtypes, shapes, scalars)
MAX_KEY_CHARS = 128
TOO_LARGE_KEPT = 4096  # keys known too large to store (sizes, not values)
SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
_ALIGN = 64  # each array starts on a cache line of the memfd
# fds received close-on-exec, as every fd of ours: no program the evaluator or a referee starts gets one
_CLOEXEC = getattr(socket, "MSG_CMSG_CLOEXEC", 0x40000000)


def shared_key(task_id: str, task_digest: str, config: str, seed: int) -> str:
    """The store's key of one reference (see the module docstring for what it covers)."""
    text = json.dumps(["c-reference-1", task_id, task_digest, config, int(seed)])
    return hashlib.sha256(text.encode()).hexdigest()


def socket_pair() -> tuple[socket.socket, socket.socket]:
    """(the parent's end, the referee's end): close-on-exec both, the referee's passed with `pass_fds`."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


# --------------------------------------------------------------------------------------------------
# Parent side


@dataclass
class _Entry:
    fd: int
    layout: dict[str, Any]
    nbytes: int


class Broker:
    """The store (see the module docstring). Thread-safe: `attach` and `report` from any thread; the
    sockets are served on the broker's own thread, started by the first `attach`."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES):
        if budget_bytes < 0:
            raise ValueError(f"Broker: budget_bytes={budget_bytes} must be >= 0 (0 stores nothing)")
        self.budget_bytes = budget_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._owners: dict[str, socket.socket] = {}  # key -> the referee computing it
        self._waiters: dict[str, list[socket.socket]] = {}
        self._too_large: OrderedDict[str, None] = OrderedDict()
        self._new: list[socket.socket] = []
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread: threading.Thread | None = None
        self._closed = False
        self.counts = {"computed": 0, "served": 0, "waited": 0, "failed": 0, "evicted": 0, "too_large": 0}

    def attach(self, sock: socket.socket) -> None:
        """Serve a referee's socket (the parent's end of `socket_pair`) until it closes."""
        with self._lock:
            if self._closed:
                sock.close()
                return
            self._new.append(sock)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="cudaperf-references", daemon=True)
                self._thread.start()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def report(self) -> dict[str, int]:
        """Counts over the pool's life: references computed (by a referee, for the store), served from
        it, requests that waited for another referee's computation, failures, evictions, entries too
        large to store; and the entries and bytes held now."""
        with self._lock:
            return {**self.counts, "entries": len(self._entries),
                    "bytes": sum(e.nbytes for e in self._entries.values()), "budget_bytes": self.budget_bytes}

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is None:  # never served a socket: nothing runs that could release them
            self._release_all()
        else:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")  # the thread releases everything as it leaves its loop
            thread.join(timeout=5.0)
        for fd in (self._wake_r, self._wake_w):  # after the thread: no write can meet a reused number
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- the broker's thread -----------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._closed:
            for key, _ in self._selector.select(timeout=1.0):
                if key.fileobj == self._wake_r:
                    self._take_new()
                    continue
                try:
                    self._serve(key.fileobj)
                except Exception:  # noqa: BLE001 - ours: that referee computes alone from now on, and
                    self._drop(key.fileobj)  # whoever waits on its keys is handed them (never stuck)
        self._release_all()

    def _take_new(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self._wake_r, 4096):
                pass
        with self._lock:
            new, self._new = self._new, []
        for sock in new:
            sock.setblocking(True)
            self._selector.register(sock, selectors.EVENT_READ)

    def _serve(self, sock: socket.socket) -> None:
        try:
            data, fds = _receive(sock)
        except OSError:
            data, fds = b"", []
        if not data:
            self._drop(sock)
            return
        try:
            message = json.loads(data)
            key = message["key"]
            op = message["op"]
            if type(key) is not str or len(key) > MAX_KEY_CHARS:
                raise ValueError(f"a key that is no digest: {str(key)[:100]}")
        except (ValueError, KeyError, TypeError):  # never sent by a referee's own code
            self._close_fds(fds)
            self._drop(sock)
            return
        with self._lock:
            if op == "get":
                self._get(sock, key)
            elif op == "put" and fds:
                self._put(sock, key, fds.pop(0), message.get("layout"), message.get("nbytes"))
            elif op == "too_large":
                self._not_stored(sock, key)
            elif op == "failed":
                self._failed(sock, key)
        self._close_fds(fds)

    def _get(self, sock: socket.socket, key: str) -> None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self.counts["served"] += 1
            self._send(sock, {"op": "hit", "layout": entry.layout}, entry.fd)
        elif key in self._too_large or self.budget_bytes == 0:
            self._send(sock, {"op": "compute", "share": False})
        elif key in self._owners:
            self.counts["waited"] += 1
            self._waiters.setdefault(key, []).append(sock)
        else:
            self._owners[key] = sock
            self._send(sock, {"op": "compute", "share": True, "budget_bytes": self.budget_bytes})

    def _put(self, sock: socket.socket, key: str, fd: int, layout: Any, nbytes: Any) -> None:
        if self._owners.get(key) is not sock or not isinstance(layout, dict) or type(nbytes) is not int:
            os.close(fd)
            return
        if not _sealed(fd, nbytes):
            os.close(fd)
            self._failed(sock, key)
            return
        if nbytes > self.budget_bytes:  # a size, not a value: every referee needing it computes its own
            os.close(fd)
            self._not_stored(sock, key)
            return
        del self._owners[key]
        self.counts["computed"] += 1
        self._entries[key] = _Entry(fd, layout, nbytes)
        for waiter in self._waiters.pop(key, []):
            self.counts["served"] += 1
            self._send(waiter, {"op": "hit", "layout": layout}, fd)
        total = sum(e.nbytes for e in self._entries.values())
        while total > self.budget_bytes and self._entries:
            _, old = self._entries.popitem(last=False)
            os.close(old.fd)  # referees that mapped it keep their mappings
            total -= old.nbytes
            self.counts["evicted"] += 1

    def _not_stored(self, sock: socket.socket, key: str) -> None:
        """The owner's entry exceeds the budget: every referee waiting for it computes its own."""
        if self._owners.get(key) is not sock:
            return
        del self._owners[key]
        self.counts["too_large"] += 1
        self._too_large[key] = None
        while len(self._too_large) > TOO_LARGE_KEPT:
            self._too_large.popitem(last=False)
        for waiter in self._waiters.pop(key, []):
            self._send(waiter, {"op": "compute", "share": False})

    def _failed(self, sock: socket.socket, key: str) -> None:
        """The owner could not compute (or publish) the key: the next waiter computes it instead."""
        if self._owners.get(key) is not sock:
            return
        del self._owners[key]
        self.counts["failed"] += 1
        waiters = self._waiters.pop(key, [])
        if waiters:
            self._owners[key] = waiters[0]
            if waiters[1:]:
                self._waiters[key] = waiters[1:]
            self._send(waiters[0], {"op": "compute", "share": True, "budget_bytes": self.budget_bytes})

    def _send(self, sock: socket.socket, message: dict[str, Any], fd: int | None = None) -> None:
        """One reply; a referee that is gone is dropped (its keys pass to their waiters)."""
        try:
            _send_json(sock, message, fd)
        except OSError:
            self._drop(sock, locked=True)

    def _drop(self, sock: socket.socket, locked: bool = False) -> None:
        """A referee's socket closed (it exited, died or was killed): forget it everywhere."""
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)
        sock.close()
        with contextlib.nullcontext() if locked else self._lock:
            for waiters in self._waiters.values():
                while sock in waiters:
                    waiters.remove(sock)
            for key in [k for k, owner in self._owners.items() if owner is sock]:
                self._failed(sock, key)

    def _release_all(self) -> None:
        with self._lock:
            for entry in self._entries.values():
                with contextlib.suppress(OSError):
                    os.close(entry.fd)
            self._entries.clear()
            socks = [k.fileobj for k in self._selector.get_map().values() if k.fileobj != self._wake_r]
            socks += self._new
            self._new = []
        for sock in socks:
            sock.close()
        self._selector.close()

    @staticmethod
    def _close_fds(fds: list[int]) -> None:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _send_json(sock: socket.socket, message: dict[str, Any], fd: int | None = None) -> None:
    """One message, with `fd` beside it when given; OSError when the other end is gone."""
    data = json.dumps(message).encode()
    socket.send_fds(sock, [data], [fd]) if fd is not None else sock.send(data)


def _receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One message and the fd it carries, if any, received close-on-exec. Hand-written because
    `socket.recv_fds` drops its `flags` argument (CPython 3.11, this machine's), so MSG_CMSG_CLOEXEC
    would never reach the kernel."""
    data, ancillary, _, _ = sock.recvmsg(MAX_MESSAGE_BYTES, socket.CMSG_LEN(4), _CLOEXEC)
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


def _sealed(fd: int, nbytes: int) -> bool:
    """Whether a published memfd is sealed against every change and holds exactly `nbytes`."""
    try:
        return (fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SEALS) == SEALS and os.fstat(fd).st_size == nbytes
    except OSError:
        return False


# --------------------------------------------------------------------------------------------------
# Referee side


class Client:
    """A referee's end of the store. `fetch(key, compute)` -> (entry, how): "shared" (from the store,
    another referee computed it), "computed" (here, and published unless too large), or "alone" (the
    broker is gone: computed here only)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.broken = False

    @classmethod
    def from_fd(cls, fd: int) -> Client:
        return cls(socket.socket(fileno=fd))

    def fetch(self, key: str, compute: Callable[[], Any]) -> tuple[Any, str]:
        """The reference of `key`; `compute()`'s exception propagates (after the broker is told)."""
        reply, fds = self._ask({"op": "get", "key": key})
        if reply.get("op") == "hit" and fds:
            try:
                return open_entry(fds[0], reply.get("layout") or {}), "shared"
            except (ValueError, KeyError, TypeError, OSError):  # not what a referee publishes: ours alone
                return compute(), "alone"
            finally:
                os.close(fds[0])
        if reply.get("op") != "compute":
            return compute(), "alone"
        try:
            entry = compute()
        except BaseException:
            self._tell({"op": "failed", "key": key})
            raise
        if not reply.get("share"):
            return entry, "computed"
        if entry.nbytes > int(reply.get("budget_bytes") or 0):
            self._tell({"op": "too_large", "key": key})
            return entry, "computed"
        try:
            fd, layout, nbytes = publish(entry)
        except Exception:  # noqa: BLE001 - no memory for the copy, say: the next asker computes its own
            self._tell({"op": "failed", "key": key})
            return entry, "computed"
        try:
            self._tell({"op": "put", "key": key, "layout": layout, "nbytes": nbytes}, fd)
            return open_entry(fd, layout), "computed"  # one copy, the store's: the private arrays go
        except (ValueError, OSError):
            return entry, "computed"
        finally:
            os.close(fd)

    def _ask(self, message: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
        if self.broken:
            return {}, []
        try:
            _send_json(self.sock, message)
            data, fds = _receive(self.sock)
        except OSError:
            data, fds = b"", []
        if not data:
            self.broken = True
            return {}, fds
        return json.loads(data), fds

    def _tell(self, message: dict[str, Any], fd: int | None = None) -> None:
        if self.broken:
            return
        try:
            _send_json(self.sock, message, fd)
        except OSError:
            self.broken = True

    def close(self) -> None:
        self.sock.close()


def publish(entry: Any) -> tuple[int, dict[str, Any], int]:
    """A `c_session.CReference` into a sealed memfd: (fd, layout, bytes). The layout names each array's
    place, dtype and shape, and holds the scalars and the reference's own time."""
    import numpy as np

    arrays: list[tuple[int, Any]] = []
    offset = 0

    def place(value: Any) -> dict[str, Any]:
        nonlocal offset
        if not isinstance(value, np.ndarray):
            return {"scalar": value}
        array = np.ascontiguousarray(value)
        offset = -(-offset // _ALIGN) * _ALIGN
        arrays.append((offset, array))
        spot = {"offset": offset, "dtype": array.dtype.str, "shape": list(array.shape)}
        offset += array.nbytes
        return spot

    layout = {"values": {k: place(v) for k, v in entry.values.items()},
              "outputs": {k: place(v) for k, v in entry.outputs.items()},
              "reference_ms": float(entry.reference_ms), "nbytes": int(entry.nbytes)}
    fd = os.memfd_create("cudaperf-c-reference", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, offset)
        for start, array in arrays:
            view = memoryview(array.reshape(-1).view(np.uint8))
            written = 0
            while written < len(view):
                written += os.pwrite(fd, view[written:], start + written)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd, layout, offset


def open_entry(fd: int, layout: dict[str, Any]) -> Any:
    """The `c_session.CReference` a sealed memfd holds: read-only arrays on a read-only shared mapping
    (the caller may close `fd`). Raises ValueError for a memfd that is not sealed or too small."""
    import numpy as np

    from cudaperf.execute.c_session import CReference

    size = os.fstat(fd).st_size
    if not _sealed(fd, size):
        raise ValueError("a shared C reference that is not sealed against changes")
    buffer = (mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                        prot=mmap.PROT_READ) if size else b"")

    def array(spot: dict[str, Any]) -> Any:
        if "scalar" in spot:
            return spot["scalar"]
        dtype, shape = np.dtype(spot["dtype"]), tuple(int(s) for s in spot["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        if spot["offset"] + count * dtype.itemsize > size:
            raise ValueError("a shared C reference's layout points past its memory")
        out = np.frombuffer(buffer, dtype=dtype, count=count, offset=spot["offset"]).reshape(shape)
        out.flags.writeable = False
        return out

    values = {k: array(v) for k, v in layout["values"].items()}
    outputs = {k: array(v) for k, v in layout["outputs"].items()}
    return CReference(values, outputs, float(layout["reference_ms"]), nbytes=int(layout["nbytes"]))
