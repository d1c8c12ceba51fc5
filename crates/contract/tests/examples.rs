//! The intentionally broken contracts of services/examples, and the file-level API.

mod common;

use common::*;
use tandem_contract::{check_file, load, LoadError};

fn error_messages(file: &str) -> Vec<String> {
    let report = check_file(services_dir().join("examples").join(file)).unwrap();
    assert!(report.machine.is_some(), "{file} parses");
    assert!(report.has_errors(), "{file} must fail the check");
    report.diagnostics.iter().filter(|d| d.is_error()).map(|d| d.message.clone()).collect()
}

#[test]
fn unknown_state_example() {
    assert_eq!(error_messages("unknown-state.machine"), ["state `Connected` is unreachable", "unknown state `Conected`"]);
}

#[test]
fn type_error_example() {
    assert_eq!(
        error_messages("type-error.machine"),
        [
            "cannot compare a state with a role: `Caller` is a role",
            "`<` compares integers, found an integer and a string",
            "`session(...)` takes a string (a session ID), found an integer",
            "`msg.sips.greeting` is a string, not a session: the navigation cannot continue with `.length`",
        ]
    );
}

#[test]
fn nondeterminism_example() {
    assert_eq!(
        error_messages("nondeterminism.machine"),
        ["state `OnHold` is unreachable", "transitions Hangup and PeerHangup are nondeterministic: both can fire in state Talking"]
    );
}

#[test]
fn every_example_fails_and_the_service_passes() {
    let dir = services_dir().join("examples");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "machine") {
            n += 1;
            match load(&path) {
                Err(LoadError::Invalid { rendered, diagnostics, .. }) => {
                    assert!(tandem_contract::has_errors(&diagnostics));
                    assert!(rendered.contains(": error: "), "{rendered}");
                }
                other => panic!("{} should be invalid: {other:?}", path.display()),
            }
        }
    }
    assert!(n >= 3);
    assert!(load(services_dir().join("dating.machine")).is_ok());
}

#[test]
fn report_rendering_and_io_errors() {
    let path = services_dir().join("examples/unknown-state.machine");
    let report = check_file(&path).unwrap();
    let text = report.render();
    let file = path.display().to_string();
    assert!(
        text.starts_with(&format!("{file}:16:3: error: state `Connected` is unreachable\n  16 |   Connected\n     |   ^^^^^^^^^\n")),
        "{text}"
    );
    assert!(text.ends_with(&format!("{file}: 2 errors, 0 warnings\n")), "{text}");

    let missing = services_dir().join("no-such.machine");
    let err = load(&missing).unwrap_err();
    assert!(matches!(err, LoadError::Io { .. }));
    assert!(err.to_string().starts_with(&format!("cannot read {}: ", missing.display())));

    // A syntax error: no machine, one diagnostic, Display is the rendering.
    let dir = std::env::temp_dir().join(format!("tandem-contract-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.machine");
    std::fs::write(&bad, "service x\nstates {\n").unwrap();
    let report = check_file(&bad).unwrap();
    assert!(report.machine.is_none());
    let err = load(&bad).unwrap_err();
    assert_eq!(err.to_string(), report.render());
    assert!(err.to_string().contains("bad.machine:3:1: error: expected `}` or a state name, found end of file"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
