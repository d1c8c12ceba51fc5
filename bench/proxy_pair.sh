# Shared by bench/proxy_syscalls.sh and bench/proxy_profile.sh (sourced, not run): the Proxy 200
# set-up in which each measures Tandem and then Kamailio under the same SIPp load.
# Expects BIN, RATE, WINDOW, $work, the pids array and port() from the sourcing script.
# TRANSPORT=tcp runs every leg over TCP (SIPp `-t t1`), else UDP.
TRANSPORT=${TRANSPORT:-udp}
case "$TRANSPORT" in
    udp) sipp_mode=u1; hop_prefix="" ;;
    tcp) sipp_mode=t1; hop_prefix="tcp:" ;;
    *) echo "TRANSPORT must be udp or tcp" >&2; exit 2 ;;
esac

# start_uac PORT UAC_PORT: a SIPp caller at RATE for WINDOW + 8 s against PORT (sets $uac);
# the caller's measurement starts 4 s later, in the steady part.
start_uac() {
    (cd "$work" && exec sipp -sf "$OLDPWD/bench/scenarios/uac_rtd.xml" -t "$sipp_mode" 127.0.0.1:"$1" -i 127.0.0.1 -p "$2" \
        -r "$RATE" -m $((RATE * (WINDOW + 8))) -l $((RATE * 10)) -nostdin -timeout $((WINDOW + 40))s >/dev/null 2>&1) &
    uac=$!
    sleep 4
}

# measure_both FN: runs `FN NAME PORT PIDS UAC_PORT` for Tandem, then for Kamailio.
measure_both() {
    local fn=$1
    # The callee: a SIPp uas answering 200 (as in find_max_rate.py's proxy200).
    uas_port=$(port)
    (cd "$work" && exec sipp -sn uas -t "$sipp_mode" -i 127.0.0.1 -p "$uas_port" -nostdin >/dev/null 2>&1) &
    pids+=($!)
    sleep 0.5

    # Tandem, one executor (as in the suite's Proxy 200 runs).
    tp=$(port); ta=$(port)
    "$BIN" run --listen "$TRANSPORT":127.0.0.1:"$tp" --admin 127.0.0.1:"$ta" --service proxy \
        --set proxy.next_hop="$hop_prefix"127.0.0.1:"$uas_port" --set container.executors=1 \
        --set container.max_transactions=1000000 >"$work/tandem.log" 2>&1 &
    tpid=$!
    pids+=($tpid)
    for _ in $(seq 50); do curl -sf 127.0.0.1:"$ta"/health >/dev/null && break; sleep 0.2; done
    "$fn" tandem "$tp" "$tpid" "$(port)"
    kill "$tpid"; wait "$tpid" 2>/dev/null || true

    # Kamailio, configured as in bench/kamailio/proxy200.cfg.in (2 children).
    kp=$(port)
    sed -e "s/@PORT@/$kp/" -e "s/@NEXT_HOP@/127.0.0.1:$uas_port/" -e "s/@PROTO@/$TRANSPORT/" -e "s/@CHILDREN@/2/" \
        bench/kamailio/proxy200.cfg.in >"$work/kamailio.cfg"
    kamailio -f "$work/kamailio.cfg" -DD -E -m 2048 -M 32 -x tlsf >"$work/kamailio.log" 2>&1 &
    kpid=$!
    pids+=($kpid)
    sleep 2
    kpids=$(echo "$kpid" $(pgrep -P "$kpid") | tr ' ' ,)
    "$fn" kamailio "$kp" "$kpids" "$(port)"
}
