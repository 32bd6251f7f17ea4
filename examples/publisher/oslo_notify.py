#!/usr/bin/python3
"""Publish notifications with the real oslo.messaging Notifier.

Each FILE holds one notification in the inner oslo shape (event_type,
priority, payload, optional _context_* members), as the fixtures do. The
Notifier (driver messagingv2) wraps it in the oslo envelope and publishes it on
the given exchange (oslo's control_exchange) with the routing key
<topic>.<priority>, exactly as a service would. Oslo chooses message_id and
timestamp itself; one JSON line per published notification on stdout says
which ones it chose:

    {"message_id": "...", "event_type": "...", "exchange": "nova", "priority": "info"}

Run with the system interpreter that has python3-oslo.messaging:

    /usr/bin/python3 examples/publisher/oslo_notify.py \\
        --url rabbit://guest:guest@127.0.0.1:5672/ --exchange nova \\
        --publisher-id compute.host1 --count 3 notification.json ...

--file-ids keeps each file's own message_id (so a test knows it in advance);
by default oslo generates a fresh uuid4 per notification, as in production.
"""

import argparse
import json
import sys
import uuid as _uuid

from oslo_config import cfg
import oslo_messaging
from oslo_messaging.notify import notifier as _notifier_mod

PRIORITIES = ("audit", "debug", "info", "warn", "error", "critical", "sample")


class _RecordingUUID:
    """Stands in for the uuid module inside oslo's notifier to learn (or
    choose) the message_id of each notification."""

    def __init__(self):
        self.queue = []
        self.last = None

    def uuid4(self):
        value = self.queue.pop(0) if self.queue else str(_uuid.uuid4())
        self.last = value
        return value


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="rabbit://guest:guest@127.0.0.1:5672/",
                    help="oslo transport_url")
    ap.add_argument("--exchange", default="nova",
                    help="control_exchange of the publishing service")
    ap.add_argument("--publisher-id", default="compute.host1")
    ap.add_argument("--topic", action="append", dest="topics",
                    help="notification topic (repeatable); default notifications")
    ap.add_argument("--priority", choices=PRIORITIES,
                    help="override the priority of every file")
    ap.add_argument("--count", type=int, default=1,
                    help="publish each file this many times")
    ap.add_argument("--file-ids", action="store_true",
                    help="use each file's message_id instead of a fresh uuid4")
    ap.add_argument("--compression",
                    help="oslo_messaging_rabbit.kombu_compression (gzip, bz2, lzma, ...)")
    ap.add_argument("files", nargs="+", metavar="FILE")
    args = ap.parse_args(argv)

    conf = cfg.ConfigOpts()
    conf([], project="tally-oslo-notify")
    oslo_messaging.set_transport_defaults(control_exchange=args.exchange)
    transport = oslo_messaging.get_notification_transport(conf, url=args.url)
    if args.compression:
        # Registered by the rabbit driver when the transport is made.
        conf.set_override("kombu_compression", args.compression,
                          group="oslo_messaging_rabbit")
    notifier = oslo_messaging.Notifier(
        transport, publisher_id=args.publisher_id, driver="messagingv2",
        topics=args.topics or ["notifications"])

    rec = _RecordingUUID()
    _notifier_mod.uuid = rec

    out = sys.stdout
    for path in args.files:
        with open(path, "rb") as f:
            note = json.load(f)
        ctxt = {k[len("_context_"):]: v for k, v in note.items()
                if k.startswith("_context_")}
        priority = (args.priority or note.get("priority") or "info").lower()
        if priority not in PRIORITIES:
            priority = "info"
        event_type = note.get("event_type") or "unknown"
        payload = note.get("payload", {})
        for _ in range(args.count):
            if args.file_ids and note.get("message_id"):
                rec.queue.append(note["message_id"])
            getattr(notifier, priority)(ctxt, event_type, payload)
            out.write(json.dumps({"message_id": rec.last, "event_type": event_type,
                                  "exchange": args.exchange,
                                  "priority": priority}) + "\n")
    out.flush()
    transport.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
