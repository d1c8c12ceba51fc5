"""Bad input over WebSocket (RFC 7118): clear refusal, bounded resources, service goes on.

`tandem run --service uas` listens on ws:127.0.0.1:P with short limits (idle 2 s, handshake
2 s, 4 connections per peer address, max_message_bytes 16 KiB). A hand-written WebSocket
client (this file; RFC 6455 framing, client frames masked) then tries:

  * an upgrade without Sec-WebSocket-Protocol, and one offering only "chat": HTTP 400;
  * plain SIP sent without any upgrade: the connection is closed, nothing answered in SIP;
  * a valid upgrade ("sip"), a text and a binary frame of garbage (answered 400 where a
    request line can be told, else dropped; the connection stays), then an OPTIONS in a text frame: 200 in a text frame on that
    connection; a text frame that is not UTF-8 fails its connection (RFC 6455 §8.1);
  * a frame announcing 1 MiB (above max_message_bytes): the connection is closed;
  * an upgrade request sent halfway and never finished: closed after the handshake timeout;
  * an upgraded connection that stays silent: closed after the idle timeout;
  * more connections than the per-peer limit: the surplus is closed at once;
and at the end an OPTIONS over WS still gets 200; the metrics count the refusals
(tandem_ws_upgrade_failures_total, tandem_ws_oversize_closed_total,
tandem_stream_idle_closed_total, tandem_stream_refused_total); SIGTERM exits 0.
Every message names 127.0.0.1 only.
"""

import base64
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
from common import check  # noqa: E402

IDLE = 2
HANDSHAKE = 2
PER_PEER = 4
MAX_BYTES = 16384


def upgrade_request(port, protocols=None, key=None):
    key = key or base64.b64encode(os.urandom(16)).decode()
    lines = ["GET / HTTP/1.1", "Host: 127.0.0.1:%d" % port, "Upgrade: websocket", "Connection: Upgrade",
             "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: %s" % key]
    if protocols:
        lines.append("Sec-WebSocket-Protocol: %s" % protocols)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_http_head(sock, timeout=3.0):
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(1)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    return data.decode("latin-1")


def frame(payload, opcode=0x1, announce=None):
    """A masked client frame; `announce` overrides the length written in the header."""
    length = len(payload) if announce is None else announce
    head = bytes([0x80 | opcode])
    if length < 126:
        head += bytes([0x80 | length])
    elif length < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", length)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", length)
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def read_frame(sock, timeout=3.0):
    """(opcode, payload) of the next server frame; None if closed or timed out."""
    sock.settimeout(timeout)

    def exact(n):
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data
    try:
        b0, b1 = exact(2)
        length = b1 & 0x7F
        if length == 126:
            length = struct.unpack("!H", exact(2))[0]
        elif length == 127:
            length = struct.unpack("!Q", exact(8))[0]
        return b0 & 0x0F, exact(length)
    except (socket.timeout, ConnectionError, OSError):
        return None


def closed_within(sock, timeout):
    """True if the peer closes (EOF or reset) within timeout; data read meanwhile is ignored."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            if not sock.recv(65536):
                return True
        except socket.timeout:
            return False
        except OSError:
            return True
    return False


def connect(port):
    return socket.create_connection(("127.0.0.1", port), timeout=3)


def upgraded(port):
    s = connect(port)
    s.sendall(upgrade_request(port, "sip"))
    head = read_http_head(s)
    check(head.startswith("HTTP/1.1 101") and "sec-websocket-protocol: sip" in head.lower(),
          "a valid upgrade was not accepted with the sip subprotocol:\n%s" % head)
    return s


def ws_options(port, sock=None):
    """OPTIONS in a text frame; the response's status code or None."""
    own = sock is None
    s = sock or upgraded(port)
    try:
        local = s.getsockname()
        msg = common.build_options(("127.0.0.1", port), local, transport="WS")
        s.sendall(frame(msg))
        while True:
            got = read_frame(s)
            if got is None:
                return None
            opcode, payload = got
            if opcode in (0x1, 0x2):
                r = common.parse_message(payload)
                # Garbage before it may have been answered 400 (no Call-ID): skip that.
                if r is not None and r.code is not None and r.code >= 200 and r.cseq_method() == "OPTIONS":
                    return r.code
    finally:
        if own:
            s.close()


def case_ws_bad_input(env):
    port = common.free_port()
    sets = ["transport.tcp_idle_timeout=\"%ds\"" % IDLE, "tls.handshake_timeout=\"%ds\"" % HANDSHAKE,
            "transport.tcp_max_connections_per_peer=%d" % PER_PEER, "transport.max_message_bytes=%d" % MAX_BYTES]
    t = common.Tandem(env, service="uas", listen=[("ws", "127.0.0.1", port)], sets=sets)
    with t:
        for offer in (None, "chat"):
            with connect(port) as s:
                s.sendall(upgrade_request(port, offer))
                head = read_http_head(s)
                check(head.startswith("HTTP/1.1 400"), "upgrade offering %r: expected HTTP 400, got:\n%s" % (offer, head))
        with connect(port) as s:
            s.sendall(common.build_options(("127.0.0.1", port), s.getsockname(), transport="TCP"))
            check(closed_within(s, 5), "SIP sent without an upgrade: the connection was not closed")

        s = upgraded(port)
        s.sendall(frame(b"this is not SIP\r\n\r\n"))
        s.sendall(frame(b"\x00\x01 binary garbage \xff", opcode=0x2))
        code = ws_options(port, sock=s)
        check(code == 200, "OPTIONS after garbage frames on the same connection got %s" % code)
        s.close()
        with upgraded(port) as s:
            # RFC 6455 §8.1: a text frame that is not UTF-8 fails the connection.
            s.sendall(frame(b"OPTIONS \xff\xfe", opcode=0x1))
            check(closed_within(s, 5), "a text frame with invalid UTF-8 did not close the connection")

        with upgraded(port) as s:
            s.sendall(frame(b"x" * 70000, announce=1 << 20))
            check(closed_within(s, 5), "a frame announcing 1 MiB did not close the connection")

        stalled = connect(port)
        stalled.sendall(upgrade_request(port, "sip")[:40])
        idle = upgraded(port)
        t0 = time.monotonic()
        check(ws_options(port) == 200, "a proper client was not served while a handshake stalled")
        check(closed_within(stalled, HANDSHAKE + 5), "the stalled upgrade was not closed after the handshake timeout")
        check(closed_within(idle, IDLE + 5), "the idle WebSocket was not closed after the idle timeout")
        env.log("stalled and idle connections closed within %.1f s" % (time.monotonic() - t0))
        stalled.close()
        idle.close()
        # Closed connections stay registered up to 1.5 s (responses in flight may still be
        # written): let them go before counting against the per-peer limit.
        time.sleep(2.0)

        held = [upgraded(port) for _ in range(PER_PEER)]
        surplus = connect(port)
        surplus.sendall(upgrade_request(port, "sip"))
        check(closed_within(surplus, 3), "connection %d from one address was not refused" % (PER_PEER + 1))
        surplus.close()
        for s in held:
            s.close()
        time.sleep(2.0)

        check(ws_options(port) == 200, "OPTIONS over WS after the bad input was not answered 200")
        _, body = common.http_get(t.admin_url + "/metrics")
        samples = common.parse_metrics(body)
        counts = {name: common.metric_sum(samples, name) or 0 for name in (
            "tandem_ws_upgrade_failures_total", "tandem_ws_oversize_closed_total",
            "tandem_stream_idle_closed_total", "tandem_stream_refused_total")}
        env.log("counters: %s" % counts)
        check(counts["tandem_ws_upgrade_failures_total"] >= 4, "upgrade failures not counted: %s" % counts)
        check(counts["tandem_ws_oversize_closed_total"] >= 1, "the oversized frame was not counted: %s" % counts)
        check(counts["tandem_stream_idle_closed_total"] >= 1, "the idle close was not counted: %s" % counts)
        check(counts["tandem_stream_refused_total"] >= 1, "the refused connection was not counted: %s" % counts)
        check(t.alive(), "tandem exited")
        t.stop()


CASES = [(None, case_ws_bad_input)]


if __name__ == "__main__":
    import run_all
    sys.exit(run_all.main(["-k", "test_ws_bad_input"] + sys.argv[1:]))
