#!/usr/bin/python3
"""Publish notifications through the real oslo.messaging Notifier (messagingv2).

Notification i of a run is corpus[i % len(corpus)], published on its service's
exchange with routing key notifications.info. Its message_id is
<prefix>-0000-4000-8000-<i as 12 hex digits>, so the test knows every id in
advance: the Notifier's own uuid4 call is answered from that sequence. Its
timestamp is 2026-01-01 00:00:00 plus i milliseconds and one microsecond (the
microsecond so that str() writes the fraction, as it does for a real clock),
so that a notification published again is a duplicate the Reporting API
recognises. Everything else (envelope, context packing, exchange and
default-queue declares) is oslo's. Every context carries auth_token
"e2e-secret-<prefix>", which must never reach the Reporting API.

The Notifier does not raise when it cannot send a notification: it logs
"Could not send notification" with the exception (a publish the broker
nacked, e.g. while a queue's node fails) and goes on. The notification is
then lost on the publisher's side, or, since a nack does not prove that the
broker dropped the message, reaches the queue all the same. Each such index is recorded, and the last
line on stdout is {"dropped": [indexes]}, so that the test can tell what
oslo never published from what the collector would have lost.

Usage: oslo_publish.py --url rabbit://guest:guest@127.0.0.1:5672/vhost
       --corpus corpus.json --prefix 0a1b2c3d --from 0 --to 1000 [--only 5,17]
"""
import argparse
import datetime
import json
import logging
import types
import uuid

from oslo_config import cfg
import oslo_messaging
import oslo_messaging.notify.notifier as notifier_module


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--from", dest="lo", type=int, required=True)
    ap.add_argument("--to", dest="hi", type=int, required=True)
    ap.add_argument("--only", default="",
                    help="comma-separated indexes in [from, to): publish only these")
    args = ap.parse_args()
    only = {int(x) for x in args.only.split(",") if x}
    logging.basicConfig(level=logging.WARNING)

    corpus = json.load(open(args.corpus))
    state = {"next": None, "i": None}
    dropped = []

    class DropRecorder(logging.Handler):
        def emit(self, record):
            if record.getMessage().startswith("Could not send notification"):
                dropped.append(state["i"])

    logging.getLogger("oslo_messaging.notify.messaging").addHandler(DropRecorder())
    notifier_module.uuid = types.SimpleNamespace(uuid4=lambda: state["next"])
    epoch = datetime.datetime(2026, 1, 1)
    notifier_module.timeutils = types.SimpleNamespace(
        utcnow=lambda: epoch + datetime.timedelta(milliseconds=state["i"], microseconds=1))

    notifiers = {}
    transports = []

    def notifier_for(item):
        key = (item["exchange"], item["publisher_id"])
        n = notifiers.get(key)
        if n is None:
            # The exchange is the transport's control_exchange, read when the
            # transport is made.
            oslo_messaging.set_transport_defaults(control_exchange=item["exchange"])
            conf = cfg.ConfigOpts()
            conf([], project="tally-e2e")
            t = oslo_messaging.get_notification_transport(conf, url=args.url)
            transports.append(t)
            n = oslo_messaging.Notifier(t, publisher_id=item["publisher_id"],
                                        driver="messagingv2", topics=["notifications"])
            notifiers[key] = n
        return n

    for i in range(args.lo, args.hi):
        if only and i not in only:
            continue
        item = corpus[i % len(corpus)]
        state["next"] = uuid.UUID("%s-0000-4000-8000-%012x" % (args.prefix, i))
        state["i"] = i
        # A request context as services send it, with a token the collector
        # must never pass on.
        ctxt = dict(item.get("context") or {})
        ctxt["auth_token"] = "e2e-secret-" + args.prefix
        notifier_for(item).info(ctxt, item["event_type"], item["payload"])

    for t in transports:
        t.cleanup()
    print(json.dumps({"dropped": dropped}))


if __name__ == "__main__":
    main()
