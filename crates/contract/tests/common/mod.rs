//! Helpers shared by the integration tests.
#![allow(dead_code)]

use tandem_contract::{Diagnostic, Severity};

pub fn services_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../services")
}

pub fn dating_source() -> String {
    std::fs::read_to_string(services_dir().join("dating.machine")).expect("services/dating.machine")
}

/// A small valid contract that the checker tests mutate.
pub const BASE: &str = "\
service t

role Caller holds state {
  peer: session Caller
  msr: session Msr once
  name: string
  count: int
}

role Msr {
  caller: session Caller once
  state via caller
}

states {
  initial Idle
  Busy
  Talking
  final Done
}

transition Start: Idle -> Busy
  when msg.method == INVITE && msg.sips.role == null
  handles msg.sips

transition Go: Busy -> Talking
  when msg.method == OK && msg.sips.role == Msr
  handles msg.sips.caller

transition End: Busy, Talking -> Done
  when msg.method == BYE && msg.sips.role == Caller
  handles msg.sips
";

/// BASE with `from` replaced by `to` (which must occur).
pub fn base_with(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "BASE has no {from:?}");
    BASE.replacen(from, to, 1)
}

/// BASE plus more declarations.
pub fn base_plus(extra: &str) -> String {
    format!("{BASE}\n{extra}\n")
}

/// Parse + check diagnostics (parse errors when it does not parse).
pub fn diagnostics(src: &str) -> Vec<Diagnostic> {
    tandem_contract::parse_and_check(src).1
}

pub fn messages(src: &str, severity: Severity) -> Vec<String> {
    diagnostics(src).into_iter().filter(|d| d.severity == severity).map(|d| d.message).collect()
}

pub fn errors(src: &str) -> Vec<String> {
    messages(src, Severity::Error)
}

pub fn warnings(src: &str) -> Vec<String> {
    messages(src, Severity::Warning)
}

/// Asserts that some error message contains `needle`.
#[track_caller]
pub fn assert_error(src: &str, needle: &str) {
    let errs = errors(src);
    assert!(errs.iter().any(|e| e.contains(needle)), "no error containing {needle:?}; errors: {errs:#?}");
}

#[track_caller]
pub fn assert_warning(src: &str, needle: &str) {
    let w = warnings(src);
    assert!(w.iter().any(|e| e.contains(needle)), "no warning containing {needle:?}; warnings: {w:#?}");
}

/// Asserts the contract has no diagnostics at all.
#[track_caller]
pub fn assert_clean(src: &str) {
    let d = diagnostics(src);
    assert!(d.is_empty(), "unexpected diagnostics:\n{}", tandem_contract::render_all(&d, "test.machine", src));
}

/// Asserts the contract has no errors (warnings allowed).
#[track_caller]
pub fn assert_no_errors(src: &str) {
    let d: Vec<Diagnostic> = diagnostics(src).into_iter().filter(|d| d.is_error()).collect();
    assert!(d.is_empty(), "unexpected errors:\n{}", tandem_contract::render_all(&d, "test.machine", src));
}
