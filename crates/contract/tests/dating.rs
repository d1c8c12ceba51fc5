//! The dating service's contract (services/dating.machine).

mod common;

use common::*;
use tandem_contract::ast::*;

fn machine() -> Machine {
    tandem_contract::parse(&dating_source()).unwrap_or_else(|d| panic!("{d:#?}"))
}

fn names(ids: &[Ident]) -> Vec<&str> {
    ids.iter().map(|i| i.name.as_str()).collect()
}

fn handles(t: &Transition) -> Vec<String> {
    t.handles.iter().map(|h| h.to_string()).collect()
}

fn moves(t: &Transition) -> Vec<(String, String)> {
    t.moves.iter().map(|m| (m.target.to_string(), m.to.name.clone())).collect()
}

#[test]
fn dating_machine_checks_clean() {
    let src = dating_source();
    assert_clean(&src);
    let (m, warnings) = tandem_contract::load(services_dir().join("dating.machine")).expect("loads");
    assert!(warnings.is_empty());
    assert_eq!(m.service.name, "dating");
}

#[test]
fn roles_and_states() {
    let m = machine();
    let caller = m.role("Caller").unwrap();
    assert!(caller.holds_state);
    assert_eq!(caller.state_via, None);
    let msr_attr = caller.attribute("msr").unwrap();
    assert!(msr_attr.once);
    assert!(matches!(&msr_attr.ty, AttrType::Session(r) if r.name == "Msr"));
    let p2t = caller.attribute("p2t").unwrap();
    assert!(!p2t.once);
    let msr = m.role("Msr").unwrap();
    assert!(!msr.holds_state);
    assert_eq!(msr.state_via.as_ref().unwrap().name, "caller");
    assert_eq!(m.state_holder().unwrap().name.name, "Caller");

    let states: Vec<(&str, StateKind)> = m.states.iter().map(|s| (s.name.name.as_str(), s.kind)).collect();
    use StateKind::*;
    assert_eq!(
        states,
        [
            ("Idle", Initial),
            ("InvitingMS", Normal),
            ("ConnectingMS2Caller", Normal),
            ("TalkingWithMS", Normal),
            ("Pairing", Normal),
            ("TalkingWithPeer", Normal),
            ("Terminating", Normal),
            ("Done", Final),
        ]
    );
}

#[test]
fn the_papers_eleven_transitions() {
    let m = machine();
    /// name, from, to, handles, moves
    type Expected<'a> = (&'a str, &'a [&'a str], &'a str, &'a [&'a str], &'a [(&'a str, &'a str)]);
    let expect: &[Expected] = &[
        ("T1", &["Idle"], "InvitingMS", &["msg.sips"], &[]),
        ("T2", &["InvitingMS"], "ConnectingMS2Caller", &["msg.sips.caller"], &[]),
        ("T3", &["InvitingMS"], "Done", &["msg.sips", "msg.sips.msr"], &[]),
        ("T4", &["ConnectingMS2Caller"], "TalkingWithMS", &["msg.sips", "msg.sips.msr"], &[]),
        ("T5", &["TalkingWithMS"], "Done", &["msg.sips", "msg.sips.msr"], &[]),
        ("T6", &["TalkingWithMS"], "TalkingWithMS", &["msg.sips.caller", "p2t"], &[]),
        ("T7", &["TalkingWithMS"], "Pairing", &["msg.sips.caller", "p2t", "p2t.msr"], &[("p2t", "Pairing")]),
        ("T8", &["Pairing"], "TalkingWithPeer", &["msg.sips"], &[]),
        ("T9", &["Pairing", "TalkingWithPeer", "Terminating"], "Pairing", &["msg.sips"], &[]),
        ("T10", &["InvitingMS"], "Done", &["msg.sips.caller"], &[]),
        ("T11", &["TalkingWithPeer"], "Done", &["msg.sips", "msg.sips.msr", "msg.sips.p2t"], &[("msg.sips.p2t", "Terminating")]),
    ];
    for (name, from, to, hs, mvs) in expect {
        let t = m.transition(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(names(&t.from), *from, "{name} from");
        assert_eq!(t.to.name, *to, "{name} to");
        assert_eq!(handles(t), *hs, "{name} handles");
        let mv: Vec<(String, String)> = mvs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        assert_eq!(moves(t), mv, "{name} moves");
    }
    // `-> same`
    let t6 = m.transition("T6").unwrap();
    assert!(t6.stays);
    assert_eq!(t6.target_for("TalkingWithMS"), "TalkingWithMS");
    let t9 = m.transition("T9").unwrap();
    assert!(t9.stays);
    let edges: Vec<(&str, &str)> = t9.edges().collect();
    assert_eq!(edges, [("Pairing", "Pairing"), ("TalkingWithPeer", "TalkingWithPeer"), ("Terminating", "Terminating")]);
    assert!(!m.transition("T7").unwrap().stays);

    // T6 and T7 bind p2t = session(msg.payl).
    for name in ["T6", "T7"] {
        let t = m.transition(name).unwrap();
        assert_eq!(t.lets.len(), 1);
        assert_eq!(t.lets[0].name.name, "p2t");
        assert_eq!(t.lets[0].value.to_string(), "session(msg.payl)");
    }
    assert_eq!(m.transition("T2").unwrap().guard.to_string(), "msg.method == OK && msg.sips.role == Msr");
    assert_eq!(
        m.transition("T7").unwrap().guard.to_string(),
        "msg.method == MESSAGE && msg.sips.role == Msr && p2t != null && p2t != msg.sips.caller && p2t.state == TalkingWithMS"
    );
}

#[test]
fn completion_transitions() {
    let m = machine();
    let names: Vec<&str> = m.transitions.iter().map(|t| t.name.name.as_str()).collect();
    let expected: Vec<String> = (1..=20).map(|i| format!("T{i}")).collect();
    assert_eq!(names, expected);
    let t12 = m.transition("T12").unwrap();
    assert_eq!((t12.from[0].name.as_str(), t12.to.name.as_str()), ("Terminating", "Done"));
    let t14 = m.transition("T14").unwrap();
    assert_eq!(moves(t14), [("msg.sips.p2t".to_string(), "Terminating".to_string())]);
    // Every non-final state has a transition to another state.
    for s in m.states.iter().filter(|s| s.kind != StateKind::Final) {
        assert!(m.transitions_from(&s.name.name).any(|t| t.target_for(&s.name.name) != s.name.name), "{} is a dead end", s.name.name);
    }
}

#[test]
fn t6_and_t7_do_not_conflict_but_a_weaker_t6_does() {
    // The guards exactly as in the brief / Table 1 (without the self-suggestion addition).
    let contract = |t6_guard: &str| {
        format!(
            "service dating
role Caller holds state {{ msr: session Msr once  p2t: session Caller }}
role Msr {{ caller: session Caller once  state via caller }}
states {{ initial Idle TalkingWithMS Pairing final Done }}
transition T1: Idle -> TalkingWithMS when msg.method == INVITE && msg.sips.role == null handles msg.sips
transition T5: TalkingWithMS, Pairing -> Done when msg.method == BYE && msg.sips.role == Caller handles msg.sips
transition T6: TalkingWithMS -> same
  let p2t = session(msg.payl)
  when {t6_guard}
  handles msg.sips.caller, p2t
transition T7: TalkingWithMS -> Pairing
  let p2t = session(msg.payl)
  when msg.method == MESSAGE && msg.sips.role == Msr && p2t != null && p2t.state == TalkingWithMS
  handles msg.sips.caller, p2t, p2t.msr
  moves p2t -> Pairing
"
        )
    };
    let good = contract("msg.method == MESSAGE && msg.sips.role == Msr && (p2t == null || p2t.state != TalkingWithMS)");
    assert_clean(&good);

    // A differently named variable bound to the same expression is recognised as the same term.
    let renamed = good.replacen("let p2t = session(msg.payl)\n  when msg.method == MESSAGE && msg.sips.role == Msr && (p2t == null || p2t.state != TalkingWithMS)\n  handles msg.sips.caller, p2t",
        "let peer = session(msg.payl)\n  when msg.method == MESSAGE && msg.sips.role == Msr && (peer == null || peer.state != TalkingWithMS)\n  handles msg.sips.caller, peer", 1);
    assert_ne!(renamed, good);
    assert_clean(&renamed);

    // `!(p2t != null && p2t.state == TalkingWithMS)` is the same condition.
    assert_clean(&contract("msg.method == MESSAGE && msg.sips.role == Msr && !(p2t != null && p2t.state == TalkingWithMS)"));

    let bad = contract("msg.method == MESSAGE && msg.sips.role == Msr && (p2t == null || msg.status == 0)");
    let diags = diagnostics(&bad);
    let conflict: Vec<_> = diags.iter().filter(|d| d.message.contains("nondeterministic")).collect();
    assert_eq!(conflict.len(), 1, "{diags:#?}");
    let d = conflict[0];
    assert!(d.is_error());
    assert_eq!(d.message, "transitions T6 and T7 are nondeterministic: both can fire in state TalkingWithMS");
    assert!(d
        .notes
        .iter()
        .any(|n| n.starts_with("T6 (line 7): when msg.method == MESSAGE && msg.sips.role == Msr && (p2t == null || msg.status == 0)")));
    assert!(d.notes.iter().any(|n| n.starts_with("T7 (line 11): when msg.method == MESSAGE")));
    assert!(
        d.notes.iter().any(|n| n.contains("msg.status == 0") && n.contains("session(msg.payl).state == TalkingWithMS")),
        "{:#?}",
        d.notes
    );
    // Points at the second transition's name.
    assert_eq!(&bad[d.span.start..d.span.end], "T7");
}

#[test]
fn guards_print_and_reparse_to_the_same_text() {
    let m = machine();
    for t in &m.transitions {
        let printed = t.guard.to_string();
        let mut src = String::from("service s\nrole C holds state { }\nstates { initial A final B }\ntransition X: A -> B\n");
        for l in &t.lets {
            src.push_str(&format!("  let {} = {}\n", l.name.name, l.value));
        }
        src.push_str(&format!("  when {printed}\n"));
        let again = tandem_contract::parse(&src).unwrap_or_else(|d| panic!("{printed}: {d:#?}"));
        assert_eq!(again.transitions[0].guard.to_string(), printed);
    }
}
