#!/bin/bash
# Sourced by instructions.sh and pgo.sh: the workload both run on one dating tandem, so that
# what is counted and what is profiled are the same. A media tandem, the dating tandem
# (container.executors=2, under the command in the array `run_under`, if any), then SIPp's
# Complete, Early Bye and Complete profiles, CALLS calls each at RATE calls/s.
#
#   dating_workload BIN SERVICE CALLS RATE WORKDIR [--set K=V ...]
#
# Prints the number of SIP messages the dating tandem received; logs go to WORKDIR. Both
# tandems are stopped with SIGINT: a clean exit (callgrind and profile-generate write then).

workload_scenarios="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/scenarios"

free_port() { python3 -c 'import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

dating_workload() {
    local bin=$1 svc=$2 calls=$3 rate=$4 work=$5 mp ma dp da sp media dating msgs s
    shift 5
    mp=$(free_port); ma=$(free_port); dp=$(free_port); da=$(free_port); sp=$(free_port)
    "$bin" run --listen udp:127.0.0.1:$mp --admin 127.0.0.1:$ma --service media \
        --set media.preference_delay=300ms --set media.answer_delay=0s >"$work/media.log" 2>&1 &
    media=$!
    ${run_under[@]+"${run_under[@]}"} "$bin" run --listen udp:127.0.0.1:$dp --admin 127.0.0.1:$da \
        --service "$svc" --set dating.media=127.0.0.1:$mp --set container.executors=2 "$@" \
        >"$work/$svc.log" 2>&1 &
    dating=$!
    for _ in $(seq 120); do curl -sf 127.0.0.1:$da/metrics >/dev/null && break; sleep 0.5; done
    for s in complete early_bye complete; do
        (cd "$work" && sipp -sf "$workload_scenarios/$s.xml" 127.0.0.1:$dp -i 127.0.0.1 -p $sp -r "$rate" \
            -m "$calls" -nostdin -timeout 120 >/dev/null 2>&1) || true
    done
    sleep 2
    msgs=$(curl -s 127.0.0.1:$da/metrics | awk '/^tandem_messages_in_total/ {s+=$2} END {print s}')
    kill -INT $dating; wait $dating 2>/dev/null || true
    kill -INT $media; wait $media 2>/dev/null || true
    echo "$msgs"
}
