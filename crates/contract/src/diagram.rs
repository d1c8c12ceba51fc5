//! Diagrams of a business machine, like the paper's Figure 1: states as nodes (the initial one
//! entered from a black dot, final ones as double circles), transitions as solid edges labelled
//! with their names (transitions with the same source and target share one edge, "T3, T5"), and
//! for each `moves NAV -> STATE` a dashed edge from every source state of the transition to
//! STATE, labelled `T7 (p2t)` (the last name of NAV).
//!
//! [`dot`] and [`mermaid`] are pure text; [`svg`] runs Graphviz's `dot -Tsvg`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::str::FromStr;

use crate::ast::*;

/// Output formats of `tandem diagram --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Dot,
    Mermaid,
    Svg,
}

impl FromStr for Format {
    type Err = DiagramError;

    fn from_str(s: &str) -> Result<Format, DiagramError> {
        match s.to_ascii_lowercase().as_str() {
            "dot" | "gv" | "graphviz" => Ok(Format::Dot),
            "mermaid" | "mmd" => Ok(Format::Mermaid),
            "svg" => Ok(Format::Svg),
            _ => Err(DiagramError::UnknownFormat(s.to_string())),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DiagramError {
    #[error("unknown diagram format `{0}` (expected dot, mermaid or svg)")]
    UnknownFormat(String),
    #[error("Graphviz `dot` is not installed (needed for SVG output): install the `graphviz` package, or use --format dot or mermaid")]
    DotNotFound,
    #[error("running Graphviz `dot`: {0}")]
    Io(#[from] std::io::Error),
    #[error("Graphviz `dot` failed ({status}): {stderr}")]
    DotFailed { status: String, stderr: String },
}

/// Renders the machine in `format`.
pub fn render(machine: &Machine, format: Format) -> Result<String, DiagramError> {
    match format {
        Format::Dot => Ok(dot(machine)),
        Format::Mermaid => Ok(mermaid(machine)),
        Format::Svg => svg(machine),
    }
}

/// One edge of the drawing.
struct Edge<'a> {
    from: &'a str,
    to: &'a str,
    label: String,
    dashed: bool,
}

/// Solid edges (merged by source and target, labels in declaration order) then dashed ones.
fn edges(m: &Machine) -> Vec<Edge<'_>> {
    let mut solid: Vec<Edge> = Vec::new();
    for t in &m.transitions {
        for (from, to) in t.edges() {
            match solid.iter_mut().find(|e| e.from == from && e.to == to) {
                Some(e) => {
                    if !e.label.split(", ").any(|l| l == t.name.name) {
                        e.label.push_str(", ");
                        e.label.push_str(&t.name.name);
                    }
                }
                None => solid.push(Edge { from, to, label: t.name.name.clone(), dashed: false }),
            }
        }
    }
    let mut dashed = Vec::new();
    for t in &m.transitions {
        for mv in &t.moves {
            let who = mv.target.path.last().map_or_else(|| mv.target.root_text().to_string(), |p| p.name.clone());
            for f in &t.from {
                dashed.push(Edge { from: &f.name, to: &mv.to.name, label: format!("{} ({who})", t.name.name), dashed: true });
            }
        }
    }
    solid.extend(dashed);
    solid
}

/// States to draw: the declared ones, then any name only used by transitions (so a diagram of
/// a machine with errors still shows everything).
fn nodes(m: &Machine) -> Vec<(&str, StateKind)> {
    let mut out: Vec<(&str, StateKind)> = m.states.iter().map(|s| (s.name.name.as_str(), s.kind)).collect();
    for e in edges(m) {
        for n in [e.from, e.to] {
            if !out.iter().any(|(x, _)| *x == n) {
                out.push((n, StateKind::Normal));
            }
        }
    }
    out
}

fn dot_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Graphviz source.
pub fn dot(m: &Machine) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph {} {{", dot_quote(&m.service.name));
    out.push_str("  rankdir=LR;\n");
    out.push_str("  node [shape=box, style=rounded, fontname=\"Helvetica\"];\n");
    out.push_str("  edge [fontname=\"Helvetica\", fontsize=10];\n");
    let nodes = nodes(m);
    for (name, kind) in &nodes {
        let q = dot_quote(name);
        if *kind == StateKind::Final {
            let _ = writeln!(out, "  {q} [shape=doublecircle, style=solid];");
        } else {
            let _ = writeln!(out, "  {q};");
        }
    }
    for (i, (name, _)) in nodes.iter().filter(|(_, k)| *k == StateKind::Initial).enumerate() {
        let start = dot_quote(&format!("__start{i}"));
        let _ = writeln!(out, "  {start} [shape=point, width=0.15, label=\"\"];");
        let _ = writeln!(out, "  {start} -> {};", dot_quote(name));
    }
    for e in edges(m) {
        let style = if e.dashed { ", style=dashed" } else { "" };
        let _ = writeln!(out, "  {} -> {} [label={}{style}];", dot_quote(e.from), dot_quote(e.to), dot_quote(&e.label));
    }
    out.push_str("}\n");
    out
}

/// Mermaid `flowchart` source (flowcharts, unlike Mermaid state diagrams, can draw dashed edges).
pub fn mermaid(m: &Machine) -> String {
    // Mermaid node IDs: the state names are identifiers already; prefix them so that names
    // Mermaid reserves (`end`, `graph`, ...) cannot break the chart.
    let id = |n: &str| format!("s_{n}");
    let text = |s: &str| s.replace('"', "#quot;");
    let mut out = String::new();
    let _ = writeln!(out, "---\ntitle: {}\n---", text(&m.service.name));
    out.push_str("flowchart LR\n");
    let nodes = nodes(m);
    for (name, kind) in &nodes {
        let shape = match kind {
            StateKind::Final => format!("((({})))", text(name)),
            _ => format!("([\"{}\"])", text(name)),
        };
        let _ = writeln!(out, "  {}{shape}", id(name));
    }
    for (i, (name, _)) in nodes.iter().filter(|(_, k)| *k == StateKind::Initial).enumerate() {
        let _ = writeln!(out, "  start{i}(( )) --> {}", id(name));
        let _ = writeln!(out, "  style start{i} fill:#000,stroke:#000");
    }
    for e in edges(m) {
        let arrow = if e.dashed { "-.->" } else { "-->" };
        let _ = writeln!(out, "  {} {arrow}|\"{}\"| {}", id(e.from), text(&e.label), id(e.to));
    }
    out
}

/// SVG rendered by Graphviz (`dot -Tsvg`); [`DiagramError::DotNotFound`] when it is not installed.
pub fn svg(m: &Machine) -> Result<String, DiagramError> {
    let mut child = match Command::new("dot").arg("-Tsvg").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(DiagramError::DotNotFound),
        Err(e) => return Err(e.into()),
    };
    let source = dot(m);
    // Write from another thread so a large output cannot deadlock against a full stdin pipe.
    let mut stdin = child.stdin.take().ok_or_else(|| std::io::Error::other("no stdin for dot"))?;
    let writer = std::thread::spawn(move || stdin.write_all(source.as_bytes()));
    let output = child.wait_with_output()?;
    match writer.join() {
        Ok(r) => r?,
        Err(_) => return Err(std::io::Error::other("writing to dot failed").into()),
    }
    if !output.status.success() {
        return Err(DiagramError::DotFailed {
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    String::from_utf8(output.stdout).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e).into())
}
