//! The `tandem check` and `tandem diagram` subcommands, run as a user would.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tandem(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tandem")).args(args).current_dir(repo()).output().expect("tandem runs")
}

#[test]
fn check_accepts_the_dating_machine() {
    let out = tandem(&["check", "services/dating.machine"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn check_reports_errors_with_file_line_col_and_a_caret() {
    let out = tandem(&["check", "services/examples/nondeterminism.machine"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("services/examples/nondeterminism.machine:43:12: error: transitions Hangup and PeerHangup are nondeterministic"),
        "{err}"
    );
    assert!(err.lines().any(|l| l.trim_start().starts_with('|') && l.contains('^')), "caret line missing: {err}");
    let out = tandem(&["check", "services/examples/unknown-state.machine"]);
    assert_eq!(out.status.code(), Some(1));
    let out = tandem(&["check", "no/such/file.machine"]);
    assert_ne!(out.status.code(), Some(0));
}

#[test]
fn diagram_draws_states_transitions_and_peer_moves() {
    let dir = std::env::temp_dir().join(format!("tandem-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dot = dir.join("dating.dot");
    let out = tandem(&["diagram", "services/dating.machine", "--format", "dot", "-o", dot.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&dot).unwrap();
    assert!(text.contains("TalkingWithMS") && text.contains("T7"));
    assert!(text.contains("dashed"), "moves are dashed edges");
    let out = tandem(&["diagram", "services/dating.machine", "--format", "mermaid"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("flowchart"));
    let out = tandem(&["diagram", "services/dating.machine", "--format", "svg", "-o", dir.join("d.svg").to_str().unwrap()]);
    if Command::new("dot").arg("-V").output().is_ok() {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(std::fs::read_to_string(dir.join("d.svg")).unwrap().contains("<svg"));
    } else {
        eprintln!("SKIP svg: Graphviz `dot` is not installed");
        assert!(!out.status.success());
    }
    let out = tandem(&["diagram", "services/dating.machine", "--format", "png"]);
    assert!(!out.status.success(), "unknown formats are refused");
}
