"""A client of tally-openstack-collector's local message channel.

Standard library only (Python 3.9 or later). The semantics are those of the
Go client (runtime/input/channel/client, docs/channel.md):

- ``Client(socket_path, mode="publish")`` returns at once; the connection is
  made, and made again after every loss, by a background thread.
- ``publish()`` queues a message and never blocks; with the queue at its
  bound it raises ``NoBufs`` (an ``OSError`` with ``errno.ENOBUFS``) and
  queues nothing. ``publish(..., wait=True)`` instead waits for the daemon's
  answer and returns the ``Settlement``. ``publish_wait()`` waits for room.
- What was written and not answered when a connection ends is sent again,
  in order, on the next one. A message is answered ``committed`` only once
  its events are in the daemon's outbox.
- ``subscribe()`` with a callback calls it on a thread of its own (never the
  thread that reads the socket, so a slow callback delays no answer);
  without one the deliveries are kept, within a bound, for ``get_data()``
  and ``next()``.
- ``close(cancel=False)`` drains the queue first; ``cancel=True`` abandons
  it. Either may be called from a callback.

    import tally_channel
    c = tally_channel.Client("/run/tally-openstack-collector/channel.sock")
    c.publish("usage.license", {"type": "license.checkout", "resource_type": "license",
                                "resource_id": "matlab-7", "project_id": "p-42"})
    c.close(timeout=60)
"""

import errno
import json
import os
import socket
import struct
import sys
import threading
import time

__all__ = [
    "Client", "Subscription", "Settlement", "Delivery", "NoBufs", "TooLarge", "ChannelError",
    "ModeError", "Closed", "Refused", "find", "list_clients",
    "STRING", "JSON", "COMMITTED", "DEAD_LETTERED", "SKIPPED", "REFUSED",
]

VERSION = 1
(HELLO, WELCOME, PUBLISH, ACK, SUBSCRIBE, UNSUBSCRIBE, SUB_STATUS, DELIVER,
 ERROR, UNSUB_STATUS, PING) = range(1, 12)
STRING, JSON = 1, 2
COMMITTED, DEAD_LETTERED, SKIPPED, REFUSED = 0, 1, 2, 3
STATUS_NAMES = {COMMITTED: "committed", DEAD_LETTERED: "dead_lettered", SKIPPED: "skipped", REFUSED: "refused"}
MODES = {"publish": 1, "subscribe": 2, "bidir": 3}
MAX_DATA = (1 << 20) - (4 << 10)
MAX_TAG = 255
MAX_FRAME = MAX_DATA + (4 << 10)
DEFAULT_PERM = 0o440


class ChannelError(Exception):
    """Base of this module's errors."""


class NoBufs(ChannelError, OSError):
    """The message would take the queue past its bound: nothing was queued."""

    def __init__(self, msg="outbound queue full"):
        OSError.__init__(self, errno.ENOBUFS, msg)


class TooLarge(NoBufs):
    """The message alone is larger than the whole queue bound: nothing was
    queued, and waiting never makes room for it (errno ENOBUFS, as NoBufs)."""

    def __init__(self, msg="message larger than the queue bound"):
        NoBufs.__init__(self, msg)


class ModeError(ChannelError):
    """Publishing on a subscribe-only client, or subscribing on a publish-only one."""


class Closed(ChannelError):
    """The client (or the subscription) is closed."""


class Refused(ChannelError):
    """The daemon refused a subscription, or had none to remove."""


class Settlement:
    """The daemon's final answer about one message."""

    __slots__ = ("seq", "status", "reason")

    def __init__(self, seq, status, reason):
        self.seq, self.status, self.reason = seq, status, reason

    @property
    def status_name(self):
        return STATUS_NAMES.get(self.status, "status(%d)" % self.status)

    def __repr__(self):
        return "Settlement(%d, %s, %r)" % (self.seq, self.status_name, self.reason)


class Delivery:
    """One message received for a subscription (a mapped event, or with raw
    a redacted notification)."""

    __slots__ = ("name", "type", "raw", "origin", "uid", "gid", "perm", "pid", "data", "dropped", "missed")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))

    @property
    def value(self):
        """The data decoded by its type: a JSON value, or the text of a STRING."""
        if self.type == JSON:
            return json.loads(self.data)
        return self.data.decode("utf-8", errors="replace")

    def __repr__(self):
        return "Delivery(%r, %d bytes)" % (self.name, len(self.data))


# --- the codec -------------------------------------------------------------

def _frame(ftype, payload=b""):
    return struct.pack(">IBB", len(payload) + 2, VERSION, ftype) + payload


def _str16(b):
    return struct.pack(">H", len(b)) + b


class _Decoder:
    def __init__(self, b):
        self.b, self.at = b, 0

    def take(self, n):
        if self.at + n > len(self.b):
            raise ChannelError("malformed frame from the daemon")
        v = self.b[self.at:self.at + n]
        self.at += n
        return v

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def bytes8(self):
        return self.take(self.unpack(">B")[0])

    def bytes16(self):
        return self.take(self.unpack(">H")[0])

    def bytes32(self):
        return self.take(self.unpack(">I")[0])

    def left(self):
        return len(self.b) - self.at


def _recv_exact(sock, n):
    chunks, got = [], 0
    while got < n:
        c = sock.recv(min(n - got, 1 << 16))
        if not c:
            raise EOFError("the daemon closed the connection")
        chunks.append(c)
        got += len(c)
    return b"".join(chunks)


def _read_frame(sock):
    (length,) = struct.unpack(">I", _recv_exact(sock, 4))
    if length < 2 or length > MAX_FRAME:
        raise ChannelError("frame of %d bytes from the daemon" % length)
    body = _recv_exact(sock, length)
    if body[0] != VERSION:
        raise ChannelError("frame of protocol version %d" % body[0])
    return body[1], body[2:]


def _infer(data, msg_type):
    """The bytes and type of a message: str and bytes are STRING, anything
    else JSON (encoded with json.dumps), unless msg_type says otherwise."""
    if isinstance(data, str):
        return data.encode(), msg_type or STRING
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), msg_type or STRING
    return json.dumps(data, separators=(",", ":")).encode(), msg_type or JSON


# --- the registry of this process's clients -------------------------------

_registry_lock = threading.Lock()
_registry = []


def find(name):
    """The oldest open client of this process with application name name, or None."""
    with _registry_lock:
        for c in _registry:
            if c.name == name:
                return c
    return None


def list_clients(name=None):
    """The open clients of this process with application name name (all when None)."""
    with _registry_lock:
        return [c for c in _registry if name is None or c.name == name]


class _Entry:
    __slots__ = ("seq", "frame", "sent", "waiter")

    def __init__(self, seq, frame):
        self.seq, self.frame, self.sent, self.waiter = seq, frame, False, None


class Subscription:
    """One expression (or exact name) subscribed to; sent again on every new
    connection until closed."""

    def __init__(self, client, sid, match, is_regex, raw, cb):
        self._c = client
        self.id, self.match, self.is_regex, self.raw, self.cb = sid, match, is_regex, raw, cb
        self.status = "pending"
        self.error = None
        self.delivered = self.missed = 0
        self._answered = threading.Event()
        self._queue = []
        self._queued = 0
        self._closed = False
        self._unsub = None

    def _frame(self):
        flags = (1 if self.raw else 0) | (0 if self.is_regex else 2)
        return _frame(SUBSCRIBE, struct.pack(">IB", self.id, flags) + _str16(self.match.encode()))

    def wait(self, timeout=None):
        """Wait for the daemon's first answer; raise Refused if it refused."""
        if not self._answered.wait(timeout):
            raise TimeoutError("no answer to the subscription")
        if self.error:
            raise Refused(self.error)

    def get_data(self):
        """The oldest delivery kept for this subscription (no callback), or None."""
        with self._c._cv:
            return self._pop()

    def next(self, timeout=None):
        """Wait for the next delivery (no callback); None at the timeout."""
        if self.cb is not None:
            raise ModeError("the subscription has a callback")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._c._cv:
            while True:
                d = self._pop()
                if d is not None:
                    return d
                if self._closed:
                    raise Closed("subscription closed")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._c._cv.wait(left)

    def _pop(self):
        if not self._queue:
            return None
        d = self._queue.pop(0)
        self._queued -= len(d.data) + 96
        return d

    def close(self, timeout=None):
        """End the subscription. While connected, wait for the daemon's answer
        (raise Refused if it had no such subscription)."""
        c = self._c
        with c._cv:
            if self._closed:
                return
            self._closed = True
            self._queue = []
            c._subs.pop(self.id, None)
            c._cv.notify_all()
            if c._state != "connected":
                return
            self._unsub = threading.Event()
            self._unsub_err = None
            c._unsubs[self.id] = self
            c._ctrl.append(_frame(UNSUBSCRIBE, struct.pack(">I", self.id)))
            c._cv.notify_all()
            ev = self._unsub
        if not ev.wait(timeout):
            raise TimeoutError("no answer to the unsubscription")
        if self._unsub_err:
            raise Refused(self._unsub_err)

    def info(self):
        return {"id": self.id, "match": self.match, "exact": not self.is_regex, "raw": self.raw,
                "polling": self.cb is None, "status": self.status, "error": self.error,
                "delivered": self.delivered, "missed": self.missed, "queued_bytes": self._queued}


class Client:
    """One end of the local message channel. Thread-safe."""

    def __init__(self, socket_path, mode="publish", name=None, reconnect_interval=1.0,
                 queue_limit_bytes=1 << 20, delivery_queue_bytes=1 << 20, on_settled=None):
        if mode not in MODES:
            raise ValueError("mode is one of %s" % ", ".join(MODES))
        self.socket_path = socket_path
        self.mode = mode
        self.name = name or os.path.basename(sys.argv[0] or "python")
        self.reconnect_interval = reconnect_interval
        self.queue_limit_bytes = queue_limit_bytes
        self.delivery_queue_bytes = delivery_queue_bytes
        self.on_settled = on_settled
        self.uid, self.gid = os.getuid(), os.getgid()

        self._cv = threading.Condition()
        self._state = "connecting"
        self._closing = False
        self._stopped = threading.Event()
        self._queue = []       # _Entry not written on the current connection, in seq order
        self._inflight = {}    # seq -> _Entry
        self._bytes = 0
        self._seq = 0
        self._sub_seq = 0
        self._subs = {}
        self._unsubs = {}
        self._ctrl = []
        self._sock = None
        self._idle = 0.0
        self._writing = 0
        self._calling = 0
        self._settle_q = []
        self._cb_q = []
        self.last_error = None
        self._stats = dict(published=0, sent=0, resent=0, acked=0, skipped=0, refused=0, dropped=0,
                           nobufs=0, delivered=0, deliver_dropped=0, local_dropped=0, pings=0, reconnects=0)
        with _registry_lock:
            _registry.append(self)
        self._threads = [threading.Thread(target=f, name="tally-channel-" + n, daemon=True)
                         for f, n in ((self._run, "io"), (self._settle_loop, "settled"),
                                      (self._callback_loop, "callbacks"))]
        for t in self._threads:
            t.start()

    # --- publishing ---------------------------------------------------------

    def publish(self, tag, data, msg_type=None, perm=DEFAULT_PERM, uid=None, gid=None, wait=False, timeout=None):
        """Queue a message and return its sequence number, never blocking;
        raise NoBufs at the queue's bound. With wait=True, wait (up to
        timeout) for the daemon's answer and return the Settlement."""
        if not MODES[self.mode] & 1:
            raise ModeError("publish on a subscribe-only client")
        tagb = tag.encode() if isinstance(tag, str) else bytes(tag)
        body, typ = _infer(data, msg_type)
        if not tagb or len(tagb) > MAX_TAG:
            raise ValueError("a tag is 1 to %d bytes" % MAX_TAG)
        if typ not in (STRING, JSON):
            raise ValueError("type %r" % typ)
        if typ == JSON:
            json.loads(body)  # raises ValueError for data that does not parse
        if len(body) > MAX_DATA:
            raise ValueError("data of %d bytes over %d" % (len(body), MAX_DATA))
        size = len(tagb) + len(body) + 48
        with self._cv:
            if self._closing:
                raise Closed("client closed")
            if size > self.queue_limit_bytes:
                self._stats["nobufs"] += 1
                raise TooLarge("message of %d bytes over the queue bound %d" % (size, self.queue_limit_bytes))
            if self._bytes + size > self.queue_limit_bytes:
                self._stats["nobufs"] += 1
                raise NoBufs()
            self._seq += 1
            seq = self._seq
            frame = _frame(PUBLISH, struct.pack(">QQIIIB", seq, time.time_ns(),
                                                self.uid if uid is None else uid,
                                                self.gid if gid is None else gid, perm & 0o777, typ)
                           + _str16(tagb) + struct.pack(">I", len(body)) + body)
            e = _Entry(seq, frame)
            if wait:
                e.waiter = [threading.Event(), None]
            self._queue.append(e)
            self._bytes += len(frame)
            self._stats["published"] += 1
            self._cv.notify_all()
        if not wait:
            return seq
        if not e.waiter[0].wait(timeout):
            raise TimeoutError("message %d not answered in time" % seq)
        return e.waiter[1]

    def publish_wait(self, tag, data, timeout=None, **kw):
        """publish(), waiting (up to timeout) for room instead of raising NoBufs."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                return self.publish(tag, data, **kw)
            except TooLarge:
                raise
            except NoBufs:
                with self._cv:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise
                    if self._bytes > 0:
                        self._cv.wait(left if left is not None else 1.0)

    def flush(self, timeout=None):
        """Wait until every message published so far is answered (and its
        on_settled returned); False at the timeout. Not from on_settled."""
        return self._wait_for(lambda: not self._queue and not self._inflight and self._calling == 0, timeout)

    def wait_sent(self, timeout=None):
        """Wait until every message published so far is written to a connection."""
        return self._wait_for(lambda: not self._queue and self._writing == 0, timeout)

    def _wait_for(self, cond, timeout):
        with self._cv:
            return self._cv.wait_for(cond, timeout)

    def set_queue_limit(self, n):
        with self._cv:
            self.queue_limit_bytes = n if n > 0 else 1 << 20
            self._cv.notify_all()

    # --- subscribing --------------------------------------------------------

    def subscribe(self, match, is_regex=True, raw=False, cb=None):
        """Subscribe to the tags (event types) matching match: a regular
        expression (Go syntax, unanchored) or, with is_regex=False, a name.
        cb(delivery) is called for each; without cb they wait for get_data()."""
        if not MODES[self.mode] & 2:
            raise ModeError("subscribe on a publish-only client")
        with self._cv:
            if self._closing:
                raise Closed("client closed")
            self._sub_seq += 1
            s = Subscription(self, self._sub_seq, match, is_regex, raw, cb)
            self._subs[s.id] = s
            if self._state == "connected":
                self._ctrl.append(s._frame())
                self._cv.notify_all()
        return s

    def subscriptions(self):
        """The open subscriptions, oldest first (the seed's subscr_json)."""
        with self._cv:
            return [self._subs[k].info() for k in sorted(self._subs)]

    def subscriptions_json(self):
        return json.dumps(self.subscriptions())

    # --- state --------------------------------------------------------------

    @property
    def state(self):
        with self._cv:
            return self._state

    def stats(self):
        with self._cv:
            s = dict(self._stats)
            s.update(name=self.name, state=self._state, mode=self.mode, queued_bytes=self._bytes,
                     queued_messages=len(self._queue), in_flight=len(self._inflight),
                     subscriptions=len(self._subs))
            return s

    def close(self, cancel=False, timeout=None):
        """End the client: drain first (up to timeout; False if the queue was
        not answered in time, what is left counting as dropped), or with
        cancel abandon the queue at once. Safe from a callback."""
        with self._cv:
            if self._state == "closed":
                return True
            self._closing = True
            self._state = "closing"
        ok = True
        if not cancel:
            ok = self._wait_for(lambda: not self._queue and not self._inflight, timeout)
        self._stopped.set()
        with self._cv:
            self._drop_conn()
            self._cv.notify_all()
        if threading.current_thread() is not self._threads[0]:
            self._threads[0].join()
        with self._cv:
            left = self._queue + list(self._inflight.values())
            self._stats["dropped"] += len(left)
            for e in left:
                if e.waiter:
                    e.waiter[0].set()
            self._queue, self._inflight, self._bytes = [], {}, 0
            self._state = "closed"
            for s in self._subs.values():
                s._closed = True
                if not s._answered.is_set():
                    s.error = "client closed"
                    s._answered.set()
            self._subs = {}
            for s in self._unsubs.values():
                s._unsub.set()
            self._unsubs = {}
            self._cb_q = []
            self._cv.notify_all()
        with _registry_lock:
            if self in _registry:
                _registry.remove(self)
        return ok

    # --- the connection -----------------------------------------------------

    def _drop_conn(self):
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _run(self):
        connected = 0
        while not self._stopped.is_set():
            with self._cv:
                if not self._closing:
                    self._state = "connecting"
            try:
                sock = self._dial()
            except (OSError, EOFError, ChannelError) as e:
                with self._cv:
                    self.last_error = e
                    if not self._closing:
                        self._state = "disconnected"
                self._stopped.wait(self.reconnect_interval)
                continue
            if connected:
                with self._cv:
                    self._stats["reconnects"] += 1
            connected += 1
            self._serve(sock)
            with self._cv:
                if not self._closing:
                    self._state = "disconnected"
            self._stopped.wait(self.reconnect_interval)

    def _dial(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(10)
            sock.connect(self.socket_path)
            name = self.name.encode()[:255]
            sock.sendall(_frame(HELLO, struct.pack(">B", MODES[self.mode]) + _str16(name)))
            ftype, payload = _read_frame(sock)
            if ftype == ERROR:
                raise ChannelError("daemon refused the connection: " + _Decoder(payload).bytes16().decode(errors="replace"))
            if ftype != WELCOME:
                raise ChannelError("frame %d before WELCOME" % ftype)
            d = _Decoder(payload)
            _max_data, _uid, _gid = d.unpack(">III")
            idle = d.unpack(">I")[0] / 1000.0 if d.left() >= 4 else 0.0
            sock.settimeout(None)
        except BaseException:
            sock.close()
            raise
        with self._cv:
            if self._stopped.is_set():
                sock.close()
                raise Closed("client closed")
            self._sock = sock
            self._idle = idle
            self.last_error = None
        return sock

    def _serve(self, sock):
        with self._cv:
            self._ctrl = [self._subs[k]._frame() for k in sorted(self._subs)]
            if not self._closing:
                self._state = "connected"
            self._stats["deliver_dropped"] = 0
            self._cv.notify_all()
        reader = threading.Thread(target=self._read, args=(sock,), name="tally-channel-reader", daemon=True)
        reader.start()
        try:
            self._write(sock, reader)
        except OSError:
            pass
        self._drop_conn()
        reader.join()
        sock.close()
        with self._cv:
            self._sock = None
            if self._inflight:
                back = sorted(self._inflight.values(), key=lambda e: e.seq)
                self._queue = back + self._queue
                self._inflight = {}
            self._writing = 0
            for s in self._unsubs.values():
                s._unsub.set()
            self._unsubs = {}
            self._ctrl = []
            self._cv.notify_all()

    def _write(self, sock, reader):
        ping = _frame(PING)
        every = self._idle / 4 if self._idle else None
        last = time.monotonic()
        while True:
            with self._cv:
                while True:
                    if self._stopped.is_set() or not reader.is_alive():
                        return
                    out = self._ctrl
                    self._ctrl = []
                    n = 0
                    while self._queue and n < (256 << 10):
                        e = self._queue.pop(0)
                        self._inflight[e.seq] = e
                        if e.sent:
                            self._stats["resent"] += 1
                        e.sent = True
                        self._stats["sent"] += 1
                        out.append(e.frame)
                        n += len(e.frame)
                    if out:
                        break
                    if every is not None and time.monotonic() - last >= every:
                        out = [ping]
                        self._stats["pings"] += 1
                        break
                    wait = 0.5 if every is None else max(0.01, min(0.5, every - (time.monotonic() - last)))
                    self._cv.wait(wait)
                self._writing = len(out)
            sock.sendall(b"".join(out))
            last = time.monotonic()
            with self._cv:
                self._writing = 0
                self._cv.notify_all()

    def _read(self, sock):
        try:
            while True:
                ftype, payload = _read_frame(sock)
                if ftype == ACK:
                    self._settle(payload)
                elif ftype == DELIVER:
                    self._deliver(payload)
                elif ftype in (SUB_STATUS, UNSUB_STATUS):
                    d = _Decoder(payload)
                    sid, status = d.unpack(">IB")
                    text = d.bytes16().decode(errors="replace")
                    with self._cv:
                        if ftype == SUB_STATUS:
                            s = self._subs.get(sid)
                            if s is not None and not s._answered.is_set():
                                s.status = "taken" if status == 0 else "refused"
                                s.error = text if status else None
                                s._answered.set()
                        else:
                            s = self._unsubs.pop(sid, None)
                            if s is not None:
                                s._unsub_err = text if status else None
                                s._unsub.set()
                elif ftype == ERROR:
                    text = _Decoder(payload).bytes16().decode(errors="replace")
                    with self._cv:
                        self.last_error = ChannelError("the daemon closed the connection: " + text)
                    return
        except (OSError, EOFError, ChannelError, struct.error):
            return
        finally:
            with self._cv:
                self._cv.notify_all()

    def _settle(self, payload):
        d = _Decoder(payload)
        (count,) = d.unpack(">I")
        with self._cv:
            for _ in range(count):
                seq, status = d.unpack(">QB")
                reason = d.bytes8().decode(errors="replace")
                e = self._inflight.pop(seq, None)
                if e is None:
                    continue
                self._bytes -= len(e.frame)
                key = {COMMITTED: "acked", DEAD_LETTERED: "acked", SKIPPED: "skipped"}.get(status, "refused")
                self._stats[key] += 1
                st = Settlement(seq, status, reason)
                if e.waiter:
                    e.waiter[1] = st
                    e.waiter[0].set()
                if self.on_settled is not None:
                    self._settle_q.append(st)
                    self._calling += 1
            self._cv.notify_all()

    def _deliver(self, payload):
        d = _Decoder(payload)
        dropped, flags, typ, uid, gid, perm = d.unpack(">QBBIII")
        origin = d.bytes8().decode(errors="replace")
        name = d.bytes16().decode(errors="replace")
        (n,) = d.unpack(">H")
        subs = d.unpack(">%dI" % n) if n else ()
        data = d.bytes32()
        pid = d.unpack(">I")[0] if d.left() >= 4 else 0
        size = len(data) + 96
        with self._cv:
            self._stats["delivered"] += 1
            self._stats["deliver_dropped"] = dropped
            for sid in subs:
                s = self._subs.get(sid)
                if s is None or s._closed:
                    continue
                if s._queued + size > self.delivery_queue_bytes:
                    s.missed += 1
                    self._stats["local_dropped"] += 1
                    continue
                s._queued += size
                s.delivered += 1
                dl = Delivery(name=name, type=typ, raw=bool(flags & 1), origin=origin, uid=uid, gid=gid,
                              perm=perm, pid=pid, data=data, dropped=dropped, missed=s.missed)
                if s.cb is not None:
                    self._cb_q.append((s, dl, size))
                else:
                    s._queue.append(dl)
            self._cv.notify_all()

    # --- callbacks, on threads of their own ---------------------------------

    def _settle_loop(self):
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._settle_q or self._state == "closed")
                if not self._settle_q:
                    return
                batch, self._settle_q = self._settle_q, []
            for st in batch:
                try:
                    self.on_settled(st)
                except Exception as e:  # a callback's error must not stop the client
                    print("tally_channel: on_settled raised %r" % e, file=sys.stderr)
                with self._cv:
                    self._calling -= 1
                    self._cv.notify_all()

    def _callback_loop(self):
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._cb_q or self._state == "closed")
                if self._state == "closed":
                    return
                s, dl, size = self._cb_q.pop(0)
                s._queued -= size
                if s._closed:
                    continue
            try:
                s.cb(dl)
            except Exception as e:
                print("tally_channel: subscription callback raised %r" % e, file=sys.stderr)
