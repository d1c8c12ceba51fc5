"""The pairing contract service (services/pairing.machine), end to end over UDP.

Forty callers each place a call (INVITE -> 200 whose body is their session ID -> ACK), then
all of them at once send a MESSAGE naming another caller's session ID: the Pair transition
touches two executions, so the contract engine acquires both sessions. Checked for each
negotiator (ordered, single-assign, global):
* every request is answered 200;
* the pairings reported in the answers are consistent: nobody is in two pairs, nobody is
  paired with itself, and the service's tandem_transitions_total{transition="Pair"} equals the
  number of pairs the callers saw;
* after everybody hangs up (BYE -> 200) no SIP session is left and no lock is held
  (tandem_negotiation_waits_total is reported; the transitions all completed).
"""

import os
import random
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from common import check  # noqa: E402

CALLERS = 40


class Caller:
    def __init__(self, server, index):
        self.server = server
        self.sock = common.udp_socket()
        self.local = self.sock.getsockname()
        self.call_id = common.new_call_id("pair%d" % index)
        self.from_tag = "caller%d" % index
        self.ruri = "sip:pairing@%s:%d" % server
        self.to_tag = None
        self.session_id = None
        self.cseq = 1

    def request(self, method, body=b"", content_type=None, cseq=None):
        to_hdr = "<%s>" % self.ruri + (";tag=%s" % self.to_tag if self.to_tag else "")
        return common.build_request(method, self.ruri, self.local, call_id=self.call_id, cseq=cseq or self.cseq,
                                    from_tag=self.from_tag, to_hdr=to_hdr, body=body, content_type=content_type)

    def transact(self, data, timeout=5.0):
        """Send (retransmitting like Timer A/E) until a final response for this CSeq."""
        want = common.parse_message(data).cseq()
        deadline = time.monotonic() + timeout
        interval, next_send = 0.5, 0.0
        while time.monotonic() < deadline:
            if time.monotonic() >= next_send:
                self.sock.sendto(data, self.server)
                next_send = time.monotonic() + interval
                interval = min(interval * 2, 4.0)
            self.sock.settimeout(max(0.01, min(next_send, deadline) - time.monotonic()))
            try:
                raw, _ = self.sock.recvfrom(70000)
            except (socket.timeout, OSError):
                continue
            r = common.parse_message(raw)
            if r and r.code and r.code >= 200 and r.cseq() == want:
                return r
        return None

    def call(self):
        r = self.transact(self.request("INVITE"))
        check(r is not None and r.code == 200, "INVITE got %s" % (r and r.first_line))
        self.to_tag = r.to_tag()
        self.session_id = r.body.decode().strip()
        check(len(self.session_id) == 32, "200 body is not a session ID: %r" % r.body[:80])
        self.sock.sendto(common.build_ack_for_2xx(r, self.local), self.server)

    def message(self, text):
        self.cseq += 1
        r = self.transact(self.request("MESSAGE", text.encode(), "text/plain"))
        check(r is not None and r.code == 200, "MESSAGE got %s" % (r and r.first_line))
        return r.body.decode().strip()

    def hang_up(self):
        self.cseq += 1
        r = self.transact(self.request("BYE"))
        check(r is not None and r.code == 200, "BYE got %s" % (r and r.first_line))


def run(env, negotiator):
    t = common.Tandem(env, name="tandem-pairing", service="pairing", sets=["negotiator.pairing=%s" % negotiator])
    with t:
        server = t.addr("udp")
        callers = [Caller(server, i) for i in range(CALLERS)]
        try:
            for c in callers:
                c.call()
            by_id = {c.session_id: c for c in callers}
            check(len(by_id) == CALLERS, "session IDs are not unique")
            rng = random.Random(7)
            answers = [None] * CALLERS
            errors = []

            def talk(i):
                try:
                    target = callers[rng.randrange(CALLERS)].session_id
                    answers[i] = (target, callers[i].message(target))
                except BaseException as e:  # noqa: BLE001 - reported below
                    errors.append("%d: %s" % (i, e))

            threads = [threading.Thread(target=talk, args=(i,)) for i in range(CALLERS)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(30)
            check(not errors, "MESSAGE failures: %s" % errors[:5])
            pairs = set()
            for i, (target, answer) in enumerate(answers):
                if answer in ("busy", ""):
                    continue
                check(answer == target, "caller %d named %s but was paired with %s" % (i, target, answer))
                me = callers[i].session_id
                check(answer != me, "caller %d paired with itself" % i)
                pairs.add(frozenset((me, answer)))
            members = [m for p in pairs for m in p]
            check(len(members) == len(set(members)), "a caller is in two pairs: %s" % sorted(members))
            check(pairs, "no pair formed at all among %d callers" % CALLERS)
            status, body = t.get("/metrics")
            samples = common.parse_metrics(body)
            taken = common.metric_sum(samples, "tandem_transitions_total", service="pairing", transition="Pair")
            check(taken == len(pairs), "service counted %s Pair transitions, callers saw %d pairs" % (taken, len(pairs)))
            env.log("%s: %d pairs, waits %s, back-offs %s" % (
                negotiator, len(pairs), common.metric_sum(samples, "tandem_negotiation_waits_total", service="pairing"),
                common.metric_sum(samples, "tandem_transition_backoffs_total", service="pairing")))
            for c in callers:
                c.hang_up()
            deadline = time.monotonic() + 5
            left = None
            while time.monotonic() < deadline:
                samples = common.parse_metrics(t.get("/metrics")[1])
                left = common.metric_sum(samples, "tandem_sip_sessions")
                if left == 0:
                    break
                time.sleep(0.1)
            check(left == 0, "%s SIP sessions left after every caller hung up" % left)
        finally:
            for c in callers:
                c.sock.close()
        t.stop()


CASES = [(n, (lambda n: lambda env: run(env, n))(n)) for n in ("ordered", "single-assign", "global")]


if __name__ == "__main__":
    import run_all
    sys.exit(run_all.main(["-k", "test_pairing"] + sys.argv[1:]))
