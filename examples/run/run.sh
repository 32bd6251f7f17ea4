#!/usr/bin/env bash
# make run: the whole product on this machine.
#
#   1. the reference Reporting API (examples/reporting-api) on 127.0.0.1:18080
#   2. the service exchanges on the local RabbitMQ, declared the way the
#      OpenStack services declare them
#   3. the collector (bin/tally-openstack-collector), consuming from its own queue
#   4. a realistic mix of notifications of every service a built-in mapper
#      reads (nova, cinder, neutron, glance, octavia, manila, designate ...),
#      published through the real oslo.messaging Notifier when
#      /usr/bin/python3 has it, else through the Go publisher that writes the
#      same wire format
#   5. the events arriving at the API, then a graceful stop
#
# Everything it writes is under var/run/ (logs, the outbox, the API's store).
# On the broker it leaves the collector's queue (QUEUE, named at the end); the
# default queues the publishers declare as oslo's Notifier does
# (<topic>.<priority>: notifications.info, ironic_versioned_notifications.info),
# which nothing consumes here, are removed at the end when this run created
# them, and named when they were there before.
# KEEP_RUNNING=1 leaves the collector and the API running until Ctrl-C.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
RUN_DIR=${RUN_DIR:-$ROOT/var/run}
API_ADDR=${API_ADDR:-127.0.0.1:18080}
HTTP_ADDR=${HTTP_ADDR:-127.0.0.1:19469}
BROKER_HOST=${BROKER_HOST:-127.0.0.1}
BROKER_PORT=${BROKER_PORT:-5672}
BROKER_URL="amqp://guest:guest@${BROKER_HOST}:${BROKER_PORT}/"
QUEUE=${QUEUE:-tally-make-run}
COUNT=${COUNT:-20} # copies of each sample notification
# The services whose samples are published (examples/run/notifications/<service>).
SERVICES=(nova cinder neutron glance octavia manila designate swift trove ironic)
EXCHANGES=nova,neutron,openstack,glance,octavia,designate,swift,trove,ironic
# ironic publishes on a topic of its own (docs/events.md, ironic).
TOPICS=notifications,ironic_versioned_notifications
GO=${GO:-go}

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
note() { printf '    %s\n' "$*"; }

# GET a path over plain HTTP with bash alone (no curl needed); prints the body.
http_get() { # host:port path [token]
	local hostport=$1 path=$2 token=${3:-}
	(
		exec 9<>"/dev/tcp/${hostport%:*}/${hostport##*:}" || exit 1
		printf 'GET %s HTTP/1.0\r\nHost: %s\r\n' "$path" "$hostport" >&9
		if [[ -n $token ]]; then printf 'Authorization: Bearer %s\r\n' "$token" >&9; fi
		printf '\r\n' >&9
		sed '1,/^\r$/d' <&9
	) 2>/dev/null
}

pretty() {
	if command -v python3 >/dev/null 2>&1; then python3 -m json.tool; else cat; fi
}

pids=()
# oslo's default queues: those the publishers declare (OSLO_QUEUES), and those
# of them that were on the broker before this run (OSLO_QUEUES_BEFORE).
OSLO_QUEUES=()
OSLO_QUEUES_BEFORE=()
oslo_queues_cleanup() {
	[[ ${#OSLO_QUEUES[@]} -gt 0 ]] || return 0
	local created=() q
	for q in "${OSLO_QUEUES[@]}"; do
		[[ " ${OSLO_QUEUES_BEFORE[*]} " == *" $q "* ]] || created+=("$q")
	done
	if [[ ${#created[@]} -gt 0 ]]; then
		local removed
		if removed=$(bin/publisher queues --url "$BROKER_URL" --delete "${created[@]}" 2>&1); then
			while read -r q n; do
				[[ -n $q ]] && note "removed oslo's default queue $q, which this run declared ($n messages nothing consumes here)"
			done <<<"$removed"
		else
			note "could not remove oslo's default queues ${created[*]}: $removed"
		fi
	fi
	for q in "${OSLO_QUEUES_BEFORE[@]}"; do
		note "oslo's default queue $q was there before this run and is left in place; it now holds this run's notifications too"
	done
	OSLO_QUEUES=()
}
cleanup() {
	local code=$?
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	oslo_queues_cleanup
	exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- RabbitMQ ---------------------------------------------------------------
if ! (exec 3<>"/dev/tcp/$BROKER_HOST/$BROKER_PORT") 2>/dev/null; then
	cat >&2 <<EOF

RabbitMQ is not running on $BROKER_HOST:$BROKER_PORT.

Start it with one of:
    sudo systemctl start rabbitmq-server
    sudo rabbitmq-server -detached && sudo rabbitmqctl await_startup
or install it first:
    sudo apt-get install rabbitmq-server
(make test, through .ci/prepare, does both.) Then run 'make run' again.
EOF
	exit 1
fi

# --- build ------------------------------------------------------------------
say "Building the reference Reporting API and the publisher (the collector is built by make)"
"$GO" build -o bin/reporting-api ./examples/reporting-api
"$GO" build -o bin/publisher ./examples/publisher
rm -rf "$RUN_DIR/outbox" "$RUN_DIR/api"
mkdir -p "$RUN_DIR"
TOKEN="make-run-$RANDOM$RANDOM"

# --- the Reporting API -------------------------------------------------------
say "Starting the reference Reporting API on http://$API_ADDR"
bin/reporting-api --addr "$API_ADDR" --token "$TOKEN" --data-dir "$RUN_DIR/api" >"$RUN_DIR/reporting-api.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 50); do
	http_get "$API_ADDR" /healthz >/dev/null 2>&1 && break
	sleep 0.1
done
http_get "$API_ADDR" /healthz >/dev/null || { echo "the Reporting API did not start; see $RUN_DIR/reporting-api.log" >&2; exit 1; }

# --- the publisher -------------------------------------------------------------
if /usr/bin/python3 -c 'import oslo_messaging' 2>/dev/null; then
	PUBLISHER=(/usr/bin/python3 examples/publisher/oslo_notify.py)
	PUBLISHER_URL="rabbit://guest:guest@${BROKER_HOST}:${BROKER_PORT}/"
	note "publishing through the real oslo.messaging Notifier (python3-oslo.messaging)"
else
	PUBLISHER=(bin/publisher)
	PUBLISHER_URL=$BROKER_URL
	note "python3-oslo.messaging is not installed: publishing with bin/publisher, which writes oslo's wire format"
fi
# service -> exchange (cinder and manila publish on oslo's default exchange, openstack)
declare -A EXCHANGE=([nova]=nova [cinder]=openstack [neutron]=neutron [glance]=glance [octavia]=octavia
	[manila]=openstack [designate]=designate [swift]=swift [trove]=trove [ironic]=ironic)
declare -A PUBLISHER_ID=([nova]=compute.host1 [cinder]=volume.host1 [neutron]=network.controller1 [glance]=image.localhost
	[octavia]=octavia-worker.controller1 [manila]=share.host1 [designate]=central.host1
	[swift]=ceilometermiddleware [trove]=taskmanager.host1 [ironic]=ironic-conductor.host1)
declare -A TOPIC=([ironic]=ironic_versioned_notifications)

publish() { # service count files...
	local svc=$1 count=$2
	shift 2
	"${PUBLISHER[@]}" --url "$PUBLISHER_URL" --exchange "${EXCHANGE[$svc]}" \
		--topic "${TOPIC[$svc]:-notifications}" \
		--publisher-id "${PUBLISHER_ID[$svc]}" --count "$count" "$@"
}

# Both publishers declare and bind oslo's default queue <topic>.<priority> for
# what they publish, as a service's Notifier does; every sample is of priority
# info. Which of them were there before is noted, so that only those this run
# creates are removed at the end.
for t in ${TOPICS//,/ }; do
	OSLO_QUEUES+=("$t.info")
done
if before=$(bin/publisher queues --url "$BROKER_URL" "${OSLO_QUEUES[@]}"); then
	while read -r q _; do
		[[ -n $q ]] && OSLO_QUEUES_BEFORE+=("$q")
	done <<<"$before"
else
	note "could not tell which of oslo's default queues (${OSLO_QUEUES[*]}) exist; none will be removed"
	OSLO_QUEUES=()
fi

# A cloud's services declare their exchanges when they first publish; the
# collector binds to exchanges and creates none. One notification of a type no
# mapper claims per service stands in for that first publish.
say "Declaring the service exchanges, as the services would ($EXCHANGES)"
warmup="$RUN_DIR/warmup.json"
printf '{"event_type":"tally.make_run.warmup","priority":"INFO","payload":{}}\n' >"$warmup"
for svc in "${SERVICES[@]}"; do
	publish "$svc" 1 "$warmup" >/dev/null
done

# --- the collector ---------------------------------------------------------------
say "Starting the collector (probes and metrics on http://$HTTP_ADDR)"
note "TALLY_OSC_QUEUE_TYPE=classic: this RabbitMQ is $( (rabbitmqctl version 2>/dev/null || echo 3.x) | head -1)."
note "The default, a quorum queue with x-delivery-limit -1, needs RabbitMQ 4.0 or later;"
note "older brokers read -1 as a limit and would drop a message on its first requeue."
TALLY_OSC_TRANSPORT_URL=$BROKER_URL \
TALLY_OSC_EXCHANGES=$EXCHANGES \
TALLY_OSC_TOPICS=$TOPICS \
TALLY_OSC_QUEUE=$QUEUE \
TALLY_OSC_QUEUE_TYPE=classic \
TALLY_OSC_BUFFER_PATH="$RUN_DIR/outbox" \
TALLY_OSC_MAPPER_CACHE_DIR="$RUN_DIR/cache" \
TALLY_OSC_REPORTING_URL="http://$API_ADDR" \
TALLY_OSC_REPORTING_TOKEN=$TOKEN \
TALLY_OSC_REPORTING_INSECURE=true \
TALLY_OSC_HTTP_ADDR=$HTTP_ADDR \
TALLY_OSC_LOG_FORMAT=json \
	bin/tally-openstack-collector >"$RUN_DIR/collector.log" 2>&1 &
collector=$!
pids+=("$collector")
note "waiting for /readyz (the first start compiles the mappers; later starts use $RUN_DIR/cache)"
for _ in $(seq 1 600); do
	if ! kill -0 "$collector" 2>/dev/null; then
		echo "the collector exited; the end of $RUN_DIR/collector.log:" >&2
		tail -20 "$RUN_DIR/collector.log" >&2
		exit 1
	fi
	[[ $(http_get "$HTTP_ADDR" /readyz 2>/dev/null) == ok* ]] && break
	sleep 0.2
done
[[ $(http_get "$HTTP_ADDR" /readyz 2>/dev/null) == ok* ]] || { echo "the collector did not become ready; see $RUN_DIR/collector.log" >&2; exit 1; }
note "ready: consuming from queue $QUEUE"

# --- the notifications ---------------------------------------------------------------
N=examples/run/notifications
say "Publishing $COUNT copies of each sample notification (${SERVICES[*]})"
expected=0
for svc in "${SERVICES[@]}"; do
	files=("$N/$svc"/*.json)
	publish "$svc" "$COUNT" "${files[@]}" >/dev/null
	note "$svc: $((COUNT * ${#files[@]})) notifications on exchange ${EXCHANGE[$svc]}"
	expected=$((expected + COUNT * ${#files[@]}))
done
# Samples of types no mapper claims: acknowledged and counted as skipped.
# dns.zone.update is the twin designate publishes beside dns.domain.update,
# which is the one mapped (docs/events.md, "One change, one event").
UNCLAIMED_SAMPLES=(nova/compute.metrics.update__ceilometer__1.json designate/dns.zone.update__dual__1.json)
mapped=$((expected - ${#UNCLAIMED_SAMPLES[@]} * COUNT))
note "$expected published; $mapped of them are of types the built-in mappers claim"

# --- the events at the API ----------------------------------------------------------
say "Events arriving at the Reporting API"
accepted=0
for _ in $(seq 1 120); do
	accepted=$(http_get "$API_ADDR" /api/v1/stats "$TOKEN" | sed -n 's/.*"accepted":\([0-9]*\).*/\1/p')
	printf '\r    accepted: %s / %s' "${accepted:-0}" "$mapped"
	[[ ${accepted:-0} -ge $mapped ]] && break
	sleep 0.5
done
echo
echo
note "The first event stored:"
http_get "$API_ADDR" "/api/v1/events?limit=1" "$TOKEN" | pretty | sed 's/^/    /'
echo
note "API statistics:"
http_get "$API_ADDR" /api/v1/stats "$TOKEN" | pretty | sed 's/^/    /'
echo
note "The collector's counters (http://$HTTP_ADDR/metrics):"
http_get "$HTTP_ADDR" /metrics | grep -E '^tally_collector_(consumed|mapped|skipped|unparseable|acked|sent_events|duplicate_events|rejected_events|outbox_depth|ready)' | sed 's/^/    /'

if [[ ${accepted:-0} -lt $mapped ]]; then
	echo "only ${accepted:-0} of $mapped events arrived; see $RUN_DIR/collector.log" >&2
	exit 1
fi

if [[ ${KEEP_RUNNING:-} == 1 ]]; then
	say "Running until Ctrl-C (API on http://$API_ADDR, token $TOKEN; collector on http://$HTTP_ADDR)"
	wait "$collector"
fi

say "Stopping the collector gracefully (SIGTERM)"
kill -TERM "$collector"
status=0
wait "$collector" || status=$?
note "exited $status"
note "logs: $RUN_DIR/collector.log, $RUN_DIR/reporting-api.log"
note "the queue $QUEUE stays bound on the broker and keeps collecting; remove it with: rabbitmqctl delete_queue $QUEUE"
oslo_queues_cleanup
