// Two JsSIP user agents in one page: bob registers and auto-answers, alice registers and
// calls bob; alice hangs up `hold` ms after the call is confirmed. Every milestone goes to
// the harness as GET /event?seq=N&name=...&detail=... (see index.html).
'use strict';

(function () {
  const q = new URLSearchParams(location.search);
  const wss = q.get('wss');
  const domain = q.get('domain');
  const hold = parseInt(q.get('hold') || '1000', 10);
  const mediaConstraints = { audio: true, video: false };
  const pcConfig = { iceServers: [] };
  let seq = 0;
  let finished = false;
  let alice = null;
  let bob = null;

  function report(name, detail) {
    const n = ++seq;
    const d = detail === undefined ? '' : String(detail);
    document.getElementById('log').textContent += n + ' ' + name + ' ' + d + '\n';
    const url = '/event?seq=' + n + '&name=' + encodeURIComponent(name) + '&detail=' + encodeURIComponent(d);
    return fetch(url, { cache: 'no-store' }).catch(function () {});
  }

  function finish(why) {
    if (finished) { return; }
    finished = true;
    // Unregister both, then say we are done (the harness stops waiting at `done`).
    for (const ua of [alice, bob]) {
      if (ua) { try { ua.stop(); } catch (e) { /* ignore */ } }
    }
    setTimeout(function () { report('done', why); }, 300);
  }

  // The page's console (JsSIP's debug log with every SIP message, when debug != 0) goes to
  // POST /log; the harness writes it to page.log next to chromium.log.
  let logSeq = 0;
  function forward(level, args) {
    const parts = [];
    for (const a of args) {
      if (typeof a === 'string') {
        if (/^color: /.test(a)) { continue; }
        parts.push(a.replace(/%c/g, ''));
      } else if (a instanceof Error) {
        parts.push(a.stack || String(a));
      } else {
        try { parts.push(JSON.stringify(a)); } catch (e) { parts.push(String(a)); }
      }
    }
    const body = (++logSeq) + ' ' + new Date().toISOString() + ' ' + level + ' ' + parts.join(' ');
    fetch('/log', { method: 'POST', body: body, cache: 'no-store' }).catch(function () {});
  }
  // Installed before jssip.min.js runs (this file is loaded first): JsSIP's loggers bind
  // console.info/warn/error when its modules load. debug/info/log go to page.log only.
  for (const level of ['debug', 'log', 'info', 'warn', 'error']) {
    const orig = console[level].bind(console);
    const echo = level === 'warn' || level === 'error';
    console[level] = function () { forward(level, arguments); if (echo) { orig.apply(null, arguments); } };
  }

  window.addEventListener('error', function (e) {
    report('page.error', (e.message || e) + ' at ' + (e.filename || '') + ':' + (e.lineno || ''));
  });
  window.addEventListener('unhandledrejection', function (e) {
    report('page.error', 'unhandled rejection: ' + (e.reason && (e.reason.stack || e.reason)));
  });

  window.addEventListener('load', main);

  function main() {
    if (!wss || !domain) {
      report('page.error', 'query string needs wss= and domain=');
      finish('bad parameters');
      return;
    }
    if (typeof JsSIP === 'undefined') {
      report('page.error', 'JsSIP did not load (jssip.min.js)');
      finish('no JsSIP');
      return;
    }
    if (q.get('debug') !== '0') { JsSIP.debug.enable('JsSIP:*'); }
    report('page.loaded', 'JsSIP ' + JsSIP.version + ' wss=' + wss + ' domain=' + domain);

    function makeUA(user) {
      const socket = new JsSIP.WebSocketInterface(wss);
      const ua = new JsSIP.UA({
        sockets: [socket],
        uri: 'sip:' + user + '@' + domain,
        display_name: user,
        register: true,
        register_expires: 120,
        session_timers: false,
        user_agent: 'tandem-browser-test JsSIP/' + JsSIP.version,
      });
      ua.on('connected', function () { report(user + '.connected', wss); });
      ua.on('disconnected', function (e) {
        report(user + '.disconnected', e && e.error ? 'error' : '');
      });
      ua.on('registered', function (e) {
        const c = e.response && e.response.getHeader('Contact');
        report(user + '.registered', e.response ? e.response.status_code + ' ' + (c || '') : '');
      });
      ua.on('unregistered', function () { report(user + '.unregistered'); });
      ua.on('registrationFailed', function (e) {
        report(user + '.registrationFailed',
          (e.cause || '') + (e.response ? ' ' + e.response.status_code + ' ' + e.response.reason_phrase : ''));
        finish(user + ' registration failed');
      });
      return ua;
    }

    function watchPeerConnection(who, session) {
      session.on('peerconnection', function (e) {
        const pc = e.peerconnection;
        pc.addEventListener('iceconnectionstatechange', function () {
          report(who + '.ice', pc.iceConnectionState);
        });
      });
    }

    function sdpSummary(sdp) {
      if (!sdp) { return 'no SDP'; }
      const has = function (re) { return re.test(sdp); };
      return [
        has(/^m=audio \d+ UDP\/TLS\/RTP\/SAVPF /m) ? 'm=audio UDP/TLS/RTP/SAVPF' : 'NO m=audio SAVPF',
        has(/^a=fingerprint:/m) ? 'fingerprint' : 'NO fingerprint',
        has(/^a=ice-ufrag:/m) ? 'ice-ufrag' : 'NO ice-ufrag',
        has(/^a=candidate:/m) ? 'candidates' : 'no candidates',
      ].join(', ');
    }

    bob = makeUA('bob');

    bob.on('newRTCSession', function (e) {
      const session = e.session;
      report('bob.newRTCSession', e.originator + ' from ' + session.remote_identity.uri.toString());
      if (e.originator !== 'remote') { return; }
      watchPeerConnection('bob', session);
      session.on('accepted', function () { report('bob.accepted'); });
      session.on('confirmed', function () { report('bob.confirmed'); });
      session.on('ended', function (ev) { report('bob.ended', ev.originator + ' ' + ev.cause); });
      session.on('failed', function (ev) { report('bob.failed', ev.originator + ' ' + ev.cause); });
      session.answer({ mediaConstraints: mediaConstraints, pcConfig: pcConfig });
    });

    bob.once('registered', function () {
      alice = makeUA('alice');
      alice.once('registered', placeCall);
      alice.start();
    });

    function placeCall() {
      const target = 'sip:bob@' + domain;
      report('alice.calling', target);
      let session = null;
      session = alice.call(target, {
        mediaConstraints: mediaConstraints,
        pcConfig: pcConfig,
        eventHandlers: {
          peerconnection: function (e) {
            const pc = e.peerconnection;
            pc.addEventListener('iceconnectionstatechange', function () {
              report('alice.ice', pc.iceConnectionState);
            });
          },
          sending: function () { report('alice.sending', 'INVITE'); },
          progress: function (e) {
            report('alice.progress', e.response ? e.response.status_code + ' ' + e.response.reason_phrase : '');
          },
          accepted: function (e) {
            const r = e.response;
            report('alice.accepted', r ? r.status_code + ' ' + r.reason_phrase + '; answer SDP: ' + sdpSummary(r.body) : '');
          },
          confirmed: function () {
            report('alice.confirmed');
            setTimeout(function () {
              report('alice.hangup');
              try { session.terminate(); } catch (err) { report('page.error', 'terminate: ' + err); }
            }, hold);
          },
          ended: function (e) {
            report('alice.ended', e.originator + ' ' + e.cause);
            setTimeout(function () { finish('alice ended'); }, 500);
          },
          failed: function (e) {
            report('alice.failed', e.originator + ' ' + e.cause +
              (e.message && e.message.status_code ? ' (' + e.message.status_code + ' ' + e.message.reason_phrase + ')' : ''));
            finish('alice failed');
          },
        },
      });
    }

    bob.start();
  }
})();
