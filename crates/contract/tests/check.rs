//! The checker's rules, each with a failing and a passing case.

mod common;

use common::*;

#[test]
fn base_is_clean() {
    assert_clean(BASE);
}

#[test]
fn duplicates() {
    assert_error(&base_plus("role Msr { }"), "duplicate role `Msr`");
    assert_error(&base_with("  count: int\n", "  count: int\n  name: bool\n"), "duplicate attribute `name` in role Caller");
    assert_error(&base_with("  Talking\n", "  Talking\n  Busy\n"), "duplicate state `Busy`");
    assert_error(
        &base_plus("transition Go: Talking -> Done when msg.method == CANCEL && msg.sips.role == Caller handles msg.sips"),
        "duplicate transition `Go`",
    );
    assert_error(
        &base_plus(
            "transition X: Talking -> Done let a = msg.payl let a = msg.payl when msg.method == CANCEL && msg.sips.role == Caller handles msg.sips",
        ),
        "duplicate variable `a` in transition X",
    );
    assert_error(&base_with("End: Busy, Talking", "End: Busy, Talking, Busy"), "duplicate source state `Busy` in transition End");
    // Same names in different scopes are fine.
    assert_clean(&base_with("  caller: session Caller once\n", "  caller: session Caller once\n  name: string\n"));
}

#[test]
fn initial_and_final_states() {
    assert_error(&base_with("initial Idle", "Idle"), "the machine has no initial state");
    assert_error(&base_with("  Busy\n", "  initial Busy\n"), "more than one initial state: `Busy`");
    assert_error(&base_with("final Done", "Done"), "the machine has no final state");
    // Two final states are fine.
    assert_clean(&base_plus(
        "states { final Rejected }\ntransition No: Busy -> Rejected when msg.method == ERROR && msg.sips.role == Msr handles msg.sips.caller",
    ));
}

#[test]
fn unknown_states() {
    assert_error(&base_with("Go: Busy -> Talking", "Go: Busy -> Talkin"), "unknown state `Talkin`");
    let d = diagnostics(&base_with("Go: Busy -> Talking", "Go: Busy -> Talkin"));
    let d = d.iter().find(|d| d.message == "unknown state `Talkin`").unwrap();
    assert!(d.notes.contains(&"did you mean `Talking`?".to_string()));
    assert_error(&base_with("End: Busy, Talking", "End: Busy, Talk"), "unknown state `Talk`");
    assert_error(
        &base_plus("transition P: Talking -> same when msg.method == INFO && msg.sips.role == Caller && msg.sips.peer.state == Paired handles msg.sips"),
        "unknown state `Paired`",
    );
    assert_error(
        &base_plus("transition P: Talking -> same when msg.method == INFO && msg.sips.role == Caller handles msg.sips, msg.sips.peer moves msg.sips.peer -> Gone"),
        "unknown state `Gone`",
    );
    assert_clean(&base_plus(
        "transition P: Talking -> same when msg.method == INFO && msg.sips.role == Caller && msg.sips.peer.state == Busy handles msg.sips, msg.sips.peer moves msg.sips.peer -> Talking",
    ));
}

#[test]
fn unknown_roles() {
    assert_error(&base_with("  peer: session Caller\n", "  peer: session Callee\n"), "unknown role `Callee`");
    assert_error(&base_with("msg.sips.role == Msr", "msg.sips.role == MSR"), "unknown role `MSR`");
    let d = diagnostics(&base_with("msg.sips.role == Msr", "msg.sips.role == MSR"));
    assert!(d.iter().any(|d| d.notes.contains(&"did you mean `Msr`?".to_string())));
}

#[test]
fn unknown_attributes() {
    // Through a session of a known role (narrowed by the guard's `msg.sips.role == Msr`).
    assert_error(&base_with("handles msg.sips.caller", "handles msg.sips.msr"), "role Msr has no attribute `msr`");
    // Through an attribute's declared type.
    assert_error(
        &base_plus("transition P: Talking -> same when msg.method == INFO && msg.sips.role == Caller handles msg.sips, msg.sips.msr.peer"),
        "role Msr has no attribute `peer`",
    );
    // A session of unknown role: some role must have it.
    assert_error(
        &base_plus("transition P: Talking -> same when msg.method == INFO && msg.sips.nobody == null handles msg.sips"),
        "no role has an attribute `nobody`",
    );
    // `role` and `state` are built-in, and only last: `.role.x` navigates a non-session.
    assert_error(
        &base_plus("transition P: Talking -> same when msg.method == INFO && msg.sips.role.x == null handles msg.sips"),
        "`msg.sips.role` is a role, not a session: the navigation cannot continue with `.x`",
    );
    assert_no_errors(&base_plus(
        "transition P: Talking -> same when msg.method == INFO && msg.sips.role == Caller && msg.sips.msr.caller.peer.state == Talking && msg.sips.count > 2 handles msg.sips, msg.sips.msr.caller",
    ));
    // msg.apps is not declared: anything goes.
    assert_clean(&base_plus("transition P: Talking -> same when msg.method == INFO && msg.apps.whatever.x == 3 handles msg.sips"));
}

#[test]
fn state_holder_and_state_via() {
    assert_error(&base_with("role Caller holds state {", "role Caller {"), "no role `holds state`");
    assert_error(&base_with("role Msr {", "role Msr holds state {"), "more than one role holds state: `Msr`");
    assert_error(
        &base_with("  state via caller\n", "  state via caller\n  x: string\n}\nrole Other {\n  o: string\n  state via o\n"),
        "`state via o` must name an attribute of type `session Caller`",
    );
    assert_error(&base_with("  state via caller\n", "  state via callr\n"), "`state via callr`: role Msr has no attribute `callr`");
    assert_error(&base_with("  count: int\n", "  count: int\n  state via peer\n"), "role Caller holds the state itself");
    assert_warning(
        &base_with("  caller: session Caller once\n", "  caller: session Caller\n"),
        "`state via caller` names an attribute that is not `once`",
    );
    // A role without `state via` is a warning, and an error once a transition takes its messages.
    let src = base_with("  state via caller\n", "");
    assert_warning(&src, "role Msr has no `state via`");
    assert_error(&src, "transition Go takes messages on Msr sessions, but role Msr has no `state via`");
    let no_msr_messages = src.replace(
        "msg.method == OK && msg.sips.role == Msr\n  handles msg.sips.caller",
        "msg.method == OK && msg.sips.role == Caller\n  handles msg.sips",
    );
    assert_no_errors(&no_msr_messages);
    assert_warning(&no_msr_messages, "role Msr has no `state via`");
}

#[test]
fn state_holder_must_be_handled() {
    assert_warning(
        &base_with("handles msg.sips.caller", "handles msg.sips"),
        "transition Go changes the execution's state but does not handle its state holder `msg.sips.caller`",
    );
    assert_warning(
        &base_plus("transition P: Talking -> same when msg.method == INFO && msg.sips.role == Caller handles msg.sips, msg.sips.msr moves msg.sips.msr -> Busy"),
        "`moves msg.sips.msr` changes a state held by `msg.sips.msr.caller`",
    );
    assert_warning(&base_with("handles msg.sips.caller", ""), "transition Go has no `handles`");
}

#[test]
fn type_errors() {
    let guard = |g: &str| {
        base_plus(&format!(
            "transition P: Talking -> same\n  let s = session(msg.payl)\n  when msg.method == INFO && {g}\n  handles msg.sips"
        ))
    };
    assert_error(&guard("msg.sips.state == msg.sips.role"), "cannot compare a state with a role");
    assert_error(&guard("msg.sips.state == Caller"), "cannot compare a state with a role: `Caller` is a role");
    assert_error(&guard("msg.sips.role == Busy"), "cannot compare a role with a state: `Busy` is a state");
    assert_error(&guard("msg.payl == msg.sips"), "cannot compare a string with a session");
    assert_error(&guard("msg.sips.role == \"Caller\""), "cannot compare a role with a string");
    assert_error(&guard("msg.payl < \"b\""), "`<` compares integers, found a string and a string");
    assert_error(&guard("msg.status >= OK"), "`>=` compares integers; `OK` is a bare name");
    assert_error(
        &base_plus("transition Q: Talking -> same let t = session(msg.status) when msg.method == INFO handles msg.sips"),
        "`session(...)` takes a string (a session ID), found an integer",
    );
    assert_error(&guard("!msg.payl"), "the operand of `!` must be a condition (a boolean), found a string");
    assert_error(&guard("(msg.status || msg.payl == \"\")"), "each operand of `||` must be a condition (a boolean), found an integer");
    assert_error(&guard("s"), "each operand of `&&` must be a condition (a boolean), found a session");
    assert_error(&guard("msg.payl.x == 1"), "`msg.payl` is a string, not a session: the navigation cannot continue with `.x`");
    assert_error(&guard("t.state == Busy"), "unknown variable `t`");
    assert_error(&guard("msg.method == null"), "a method is never null");
    assert_error(&guard("Busy"), "the bare name `Busy` must be compared with something");
    assert_error(&guard("Busy == Talking"), "cannot tell what `Busy` and `Talking` are");
    assert_error(
        &base_plus("transition P: Talking -> same when msg.status handles msg.sips"),
        "the guard must be a condition (a boolean), found an integer",
    );
    assert_error(
        &base_plus("transition Q: Talking -> same when msg.method == INFO handles msg.sips, msg.payl"),
        "a handle must designate a session; `msg.payl` is a string",
    );
    assert_warning(&guard("msg.method == Info"), "`Info` does not look like a SIP method");
    assert_warning(&guard("msg.cseq == Bye"), "`Bye` does not look like a SIP method");
    assert_error(&guard("msg.cseq == 3"), "cannot compare");
    // Well-typed counterparts.
    assert_no_errors(&guard(
        "msg.sips.state == Busy && s != null && s.role == Caller && s.state == msg.sips.state && msg.status >= 200 && msg.status < 300 \
         && msg.payl == \"x\" && !(msg.timer != \"t\") && s.count <= 3 && s.name == null && s == msg.sips && msg.method == NOTIFY",
    ));
}

#[test]
fn moves_need_a_handle() {
    let src = base_plus(
        "transition P: Talking -> same when msg.method == INFO && msg.sips.role == Caller handles msg.sips moves msg.sips.peer -> Busy",
    );
    assert_error(&src, "`moves msg.sips.peer`: `msg.sips.peer` is not among the handles of transition P");
    assert_clean(&src.replace("handles msg.sips moves", "handles msg.sips, msg.sips.peer moves"));
    assert_error(
        &src.replace("moves msg.sips.peer", "moves msg.sips.name"),
        "the target of `moves` must designate a session; `msg.sips.name` is a string",
    );
}

#[test]
fn no_transitions_out_of_final_states() {
    assert_error(
        &base_plus("transition Again: Done -> Busy when msg.method == INVITE && msg.sips.role == Caller handles msg.sips"),
        "transition Again leaves the final state `Done`",
    );
}

#[test]
fn unreachable_states() {
    let src = base_with("  Talking\n", "  Talking\n  Parked\n")
        + "\ntransition Unpark: Parked -> Talking when msg.method == INFO && msg.sips.role == Caller handles msg.sips\n";
    assert_error(&src, "state `Parked` is unreachable");
    // Reachable only because another execution's transition moves it there: fine.
    let moved = src + "transition Park: Talking -> same when msg.method == REFER && msg.sips.role == Caller handles msg.sips, msg.sips.peer moves msg.sips.peer -> Parked\n";
    assert_clean(&moved);
}

#[test]
fn states_with_no_way_out() {
    let src = base_with("End: Busy, Talking", "End: Busy");
    assert_error(&src, "state `Talking` has no way out");
    // A self-loop is no way out.
    let looped = src.clone() + "\ntransition Loop: Talking -> same when msg.method == INFO && msg.sips.role == Caller handles msg.sips\n";
    assert_error(&looped, "state `Talking` has no way out");
    // A cycle that never reaches a final state.
    let cycle = base_with("  Talking\n", "  Talking\n  Ping\n  Pong\n")
        + "\ntransition ToPing: Talking -> Ping when msg.method == INFO && msg.sips.role == Caller handles msg.sips\n\
           transition ToPong: Ping -> Pong when msg.method == INFO && msg.sips.role == Caller handles msg.sips\n\
           transition Back: Pong -> Ping when msg.method == INFO && msg.sips.role == Caller handles msg.sips\n";
    assert_error(&cycle, "no final state can be reached from state `Ping`");
    assert_error(&cycle, "no final state can be reached from state `Pong`");
    assert_clean(&cycle.replace("Back: Pong -> Ping", "Back: Pong -> Done"));
}

#[test]
fn nondeterminism() {
    let with = |g1: &str, g2: &str| {
        base_plus(&format!(
            "transition A1: Talking -> same\n  let p = session(msg.payl)\n  when {g1}\n  handles msg.sips\n\
             transition A2: Talking -> same\n  let q = session(msg.payl)\n  when {g2}\n  handles msg.sips\n"
        ))
    };
    let conflict = "transitions A1 and A2 are nondeterministic: both can fire in state Talking";
    // Overlapping guards.
    assert_error(&with("msg.method == INFO", "msg.method == INFO && msg.sips.role == Caller"), conflict);
    assert_error(&with("msg.method == INFO || msg.method == NOTIFY", "msg.method == NOTIFY"), conflict);
    assert_error(&with("msg.method == OK && msg.status < 250", "msg.method == OK && msg.status >= 240"), conflict);
    assert_error(&with("msg.method == INFO && p == null", "msg.method == INFO && q.role == Caller"), conflict);
    // With a transition of the base machine (End: BYE from a Caller session, also from Talking).
    assert_error(&with("msg.method == BYE", "false"), "transitions End and A1 are nondeterministic: both can fire in state Talking");
    // Exclusive guards.
    assert_no_errors(&with("msg.method == INFO", "msg.method == NOTIFY"));
    assert_no_errors(&with("msg.method == INFO && msg.sips.role == Caller", "msg.method == INFO && msg.sips.role == Msr"));
    assert_no_errors(&with("msg.method == INFO && msg.sips.role == null", "msg.method == INFO && msg.sips.role == Msr"));
    assert_no_errors(&with("msg.method == INFO && p == null", "msg.method == INFO && q != null"));
    assert_no_errors(&with("msg.method == INFO && msg.sips.peer.state == Busy", "msg.method == INFO && !(msg.sips.peer.state == Busy)"));
    assert_no_errors(&with("msg.method == ERROR && msg.status < 400", "msg.method == ERROR && msg.status >= 400"));
    assert_no_errors(&with("msg.method == OK", "msg.method == ERROR || msg.method == PROVISIONAL"));
    assert_no_errors(&with("msg.method == OK && msg.status == 202", "msg.status == 486"));
    assert_no_errors(&with("msg.method == TIMER && msg.timer == \"a\"", "msg.method == TIMER && msg.timer == \"b\""));
    // `msg.cseq` names a method: the answers to an INVITE and to a BYE are told apart.
    assert_no_errors(&with("msg.method == OK && msg.cseq == INVITE", "msg.method == OK && msg.cseq != INVITE"));
    assert_no_errors(&with("msg.method == OK && msg.cseq == INVITE", "msg.method == OK && msg.cseq == BYE"));
    assert_error(&with("msg.method == OK", "msg.method == OK && msg.cseq == BYE"), "nondeterministic");
    // Transitions with no common source state never conflict.
    assert_no_errors(&base_plus(
        "transition Z: Busy -> same when msg.method == INFO handles msg.sips\ntransition Y: Talking -> same when msg.method == INFO handles msg.sips",
    ));
    // The note shows both guards and a message satisfying both.
    let d = diagnostics(&with("msg.method == INFO", "msg.method == INFO && msg.sips.role == Caller"));
    let d = d.iter().find(|d| d.message == conflict).unwrap();
    assert!(d.notes[0].ends_with("when msg.method == INFO"), "{:?}", d.notes);
    assert!(d.notes[1].ends_with("when msg.method == INFO && msg.sips.role == Caller"));
    assert_eq!(d.notes[2], "both guards hold when msg.method == INFO && msg.sips.role == Caller");
    // A guard that can never hold is a warning.
    assert_warning(
        &with("msg.method == INFO && msg.method == NOTIFY", "msg.method == ACK"),
        "the guard of transition A1 can never be true",
    );
}

#[test]
fn warnings_do_not_fail_the_check() {
    let src = base_with("msg.method == BYE", "msg.method == Bye");
    let diags = diagnostics(&src);
    assert!(!diags.is_empty());
    assert!(!tandem_contract::has_errors(&diags));
    assert!(diags.iter().all(|d| d.severity == tandem_contract::Severity::Warning));
}

#[test]
fn diagnostics_are_sorted_by_position() {
    let src = base_with("Go: Busy -> Talking", "Go: Busy -> Talkin").replace("msg.sips.role == Msr", "msg.sips.role == MSR");
    let d = diagnostics(&src);
    assert!(d.len() >= 2);
    assert!(d.windows(2).all(|w| w[0].span.start <= w[1].span.start));
}
