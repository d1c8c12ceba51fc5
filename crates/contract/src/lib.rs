//! Tandem's synchronization-contract language.
//!
//! A contract describes one service's business machine (roles, states, transitions); each
//! transition has a guard and the handles whose sessions it needs exclusively (Huang, Dillon and
//! Stirewalt, "Contract-Based Synchronization of IP Telecommunication Services"). The language is
//! documented in `docs/contracts.md`.
//!
//! - [`parse`]: source text to [`ast::Machine`] (or syntax diagnostics);
//! - [`check`]: the static rules (unknown names, types, reachability, nondeterminism, ...);
//! - [`load`] / [`check_file`]: read a file, parse and check it;
//! - [`render`] / [`render_all`]: diagnostics as `file:line:col: error: ...` with the source line;
//! - [`diagram`]: Graphviz, Mermaid and SVG drawings of the machine.
#![forbid(unsafe_code)]

pub mod ast;
mod check;
pub mod codegen;
mod diagnostic;
pub mod diagram;
mod nondet;
mod parser;
mod util;

use std::path::{Path, PathBuf};

pub use check::check;
pub use diagnostic::{has_errors, render, render_all, Diagnostic, Severity};
pub use parser::parse;

/// What `msg.method` names besides the SIP methods (`tandem_sip::Method::STANDARD_NAMES` and
/// extension methods): a provisional, a 2xx and another final response, and a timer.
pub const EVENT_METHODS: [&str; 4] = ["PROVISIONAL", "OK", "ERROR", "TIMER"];

/// Parses and, when that succeeds, checks `source`. Returns the machine (None on a syntax
/// error) and every diagnostic, parse and check alike.
pub fn parse_and_check(source: &str) -> (Option<ast::Machine>, Vec<Diagnostic>) {
    match parse(source) {
        Ok(m) => {
            let diags = check(&m);
            (Some(m), diags)
        }
        Err(diags) => (None, diags),
    }
}

/// The outcome of checking one contract file; what `tandem check FILE` prints.
#[derive(Debug, Clone)]
pub struct Report {
    pub path: PathBuf,
    pub source: String,
    /// None when the file does not parse.
    pub machine: Option<ast::Machine>,
    /// Errors and warnings, in source order.
    pub diagnostics: Vec<Diagnostic>,
}

impl Report {
    pub fn has_errors(&self) -> bool {
        has_errors(&self.diagnostics)
    }

    /// Every diagnostic rendered with [`render`], then a summary line (empty when clean).
    pub fn render(&self) -> String {
        render_all(&self.diagnostics, &self.path.display().to_string(), &self.source)
    }
}

/// Reads, parses and checks a contract file. Only an unreadable file is an `Err`; problems in
/// the contract are in the report.
pub fn check_file(path: impl AsRef<Path>) -> Result<Report, LoadError> {
    let path = path.as_ref();
    let source = std::fs::read_to_string(path).map_err(|source| LoadError::Io { path: path.to_path_buf(), source })?;
    let (machine, diagnostics) = parse_and_check(&source);
    Ok(Report { path: path.to_path_buf(), source, machine, diagnostics })
}

/// Reads, parses and checks a contract file, for code that runs or draws the machine. `Ok`
/// holds the machine and its warnings (render them with [`render`] and the file's text, or use
/// [`check_file`]); any error makes the whole load fail with [`LoadError::Invalid`], whose
/// `Display` is the rendered diagnostics.
pub fn load(path: impl AsRef<Path>) -> Result<(ast::Machine, Vec<Diagnostic>), LoadError> {
    let report = check_file(path)?;
    match report.machine {
        Some(machine) if !has_errors(&report.diagnostics) => Ok((machine, report.diagnostics)),
        _ => {
            let rendered = render_all(&report.diagnostics, &report.path.display().to_string(), &report.source);
            Err(LoadError::Invalid { path: report.path, diagnostics: report.diagnostics, rendered })
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// The contract has errors. `rendered` is every diagnostic (errors and warnings) rendered
    /// against the file's text, ending with a summary line.
    #[error("{rendered}")]
    Invalid { path: PathBuf, diagnostics: Vec<Diagnostic>, rendered: String },
}
