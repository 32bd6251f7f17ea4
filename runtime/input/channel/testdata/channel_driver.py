"""Drives the Python client (examples/channel/python) for the channel's
tests: one JSON line per event on standard output.

    publish  fills the queue before the daemon exists (printing "nobufs"),
             waits for a line on standard input, then publishes CHANNEL_COUNT messages with publish_wait,
             printing "progress" every 100 settlements, publishes one more
             with wait=True, flushes and prints "done" with the statistics
    tap      subscribes to CHANNEL_REGEX with a callback and to the exact
             name CHANNEL_EXACT for polling, prints "subscribed", then each
             delivery, until it has CHANNEL_COUNT of each; then unsubscribes
             both (printing "unsubscribed") and prints "done"
"""

import json
import os
import sys
import threading

import tally_channel as tc

out_lock = threading.Lock()


def emit(**kw):
    with out_lock:
        sys.stdout.write(json.dumps(kw) + "\n")
        sys.stdout.flush()


def usage(i, prefix):
    return {"id": "%s-%d" % (prefix, i), "time": "2026-01-05T10:00:00Z", "type": "license.checkout",
            "resource_type": "license", "resource_id": "matlab", "project_id": "p1", "attributes": {"seats": 1}}


def publish(sock, n, prefix):
    settled = {"n": 0}
    statuses = {}

    def on_settled(s):
        settled["n"] += 1
        statuses[s.status_name] = statuses.get(s.status_name, 0) + 1
        if settled["n"] % 100 == 0:
            emit(kind="progress", settled=settled["n"])

    c = tc.Client(sock, mode="publish", name="py-driver", reconnect_interval=0.05,
                  queue_limit_bytes=32 << 10, on_settled=on_settled)
    assert tc.find("py-driver") is c and c in tc.list_clients("py-driver")
    # Nothing listens yet: the bounded queue fills and answers ENOBUFS.
    queued = 0
    while True:
        try:
            c.publish("usage", usage(queued, prefix))
        except tc.NoBufs as e:
            assert e.errno == __import__("errno").ENOBUFS
            break
        queued += 1
    # A higher bound takes one more at once.
    c.set_queue_limit(c.queue_limit_bytes + 4096)
    c.publish("usage", usage(queued, prefix))
    queued += 1
    emit(kind="nobufs", queued=queued, state=c.state)
    # The test starts the daemon, and stops it again while this queue is
    # still in flight; it says go once a new daemon is up.
    sys.stdin.readline()
    for i in range(queued, n):
        c.publish_wait("usage", usage(i, prefix), timeout=120)
    # The last one as text: a str is published as STRING, and waited for.
    text = "id=%s-%d type=license.checkout resource_type=license resource_id=matlab project_id=p1" % (prefix, n)
    st = c.publish("usage", text, wait=True, timeout=120)
    if not c.flush(timeout=120):
        emit(kind="error", error="flush timed out")
        return 1
    c.close(timeout=10)
    emit(kind="done", last=st.status_name, statuses=statuses, stats=c.stats())
    return 0


def tap(sock, n, regex, exact):
    got = []
    done = threading.Event()

    def cb(d):
        got.append(d)
        emit(kind="delivery", via="callback", name=d.name, pid=d.pid, uid=d.uid, value=d.value)
        if len(got) >= n:
            done.set()

    c = tc.Client(sock, mode="subscribe", name="py-tap", reconnect_interval=0.05)
    s1 = c.subscribe(regex, cb=cb)
    s2 = c.subscribe(exact, is_regex=False)
    s1.wait(30)
    s2.wait(30)
    emit(kind="subscribed", subscriptions=c.subscriptions())
    polled = 0
    while polled < n:
        d = s2.next(timeout=60)
        if d is None:
            emit(kind="error", error="no delivery to poll")
            return 1
        polled += 1
        emit(kind="delivery", via="poll", name=d.name, pid=d.pid, uid=d.uid, value=d.value)
    if not done.wait(60):
        emit(kind="error", error="callback deliveries missing")
        return 1
    s1.close(30)
    s2.close(30)
    emit(kind="unsubscribed", left=len(c.subscriptions()))
    c.close(cancel=True)
    emit(kind="done", stats=c.stats())
    return 0


def main():
    mode = sys.argv[1]
    sock = os.environ["CHANNEL_SOCKET"]
    n = int(os.environ.get("CHANNEL_COUNT", "10"))
    if mode == "publish":
        return publish(sock, n, os.environ.get("CHANNEL_ID_PREFIX", "py"))
    if mode == "tap":
        return tap(sock, n, os.environ["CHANNEL_REGEX"], os.environ["CHANNEL_EXACT"])
    print("unknown mode", mode, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
