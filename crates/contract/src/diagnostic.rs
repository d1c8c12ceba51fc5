//! Diagnostics (errors and warnings) with source spans, and their rendering.

use std::fmt;

use crate::ast::Span;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Error,
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One message of the parser or the checker, attached to a span of the contract's source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub message: String,
    pub span: Span,
    /// Extra explanations, printed after the source excerpt as `= note: ...`.
    pub notes: Vec<String>,
}

impl Diagnostic {
    pub fn error(message: impl Into<String>, span: Span) -> Diagnostic {
        Diagnostic { severity: Severity::Error, message: message.into(), span, notes: Vec::new() }
    }

    pub fn warning(message: impl Into<String>, span: Span) -> Diagnostic {
        Diagnostic { severity: Severity::Warning, message: message.into(), span, notes: Vec::new() }
    }

    /// Adds a note (builder style).
    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    /// `line:col: severity: message` (no file name, no excerpt; see [`render`] for those).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}: {}", self.span.line, self.span.col, self.severity, self.message)
    }
}

/// True when any diagnostic is an error.
pub fn has_errors(diags: &[Diagnostic]) -> bool {
    diags.iter().any(Diagnostic::is_error)
}

/// Renders one diagnostic like a compiler does:
///
/// ```text
/// dating.machine:3:16: error: unknown state `Foo`
///    3 | transition T2: Foo -> Bar
///      |                ^^^
///      = note: the states are `Idle`, `InvitingMS` and `Done`
/// ```
///
/// The carets cover the span, clamped to the span's first line (at least one caret). The
/// result ends with a newline.
pub fn render(diag: &Diagnostic, file: &str, source: &str) -> String {
    let line_no = diag.span.line.max(1);
    let col = diag.span.col.max(1);
    let mut out = format!("{file}:{line_no}:{col}: {}: {}\n", diag.severity, diag.message);

    let gutter = line_no.to_string().len().max(4);
    let pad = " ".repeat(gutter);
    if let Some((line_start, text)) = source_line(source, line_no) {
        out.push_str(&format!("{line_no:>gutter$} | {text}\n"));
        // Caret start: the span's byte offset when it lies on this line, else its column.
        let line_end = line_start + text.len();
        let start_char = if diag.span.start >= line_start && diag.span.start <= line_end && source.is_char_boundary(diag.span.start) {
            source[line_start..diag.span.start].chars().count()
        } else {
            (col as usize - 1).min(text.chars().count())
        };
        let start_byte = text.char_indices().nth(start_char).map_or(text.len(), |(i, _)| i);
        let span_end = diag.span.end.clamp(line_start + start_byte, line_end);
        let width = if source.is_char_boundary(span_end) { source[line_start + start_byte..span_end].chars().count() } else { 1 }.max(1);
        // Keep tabs under tabs so the carets line up in a terminal.
        let lead: String = text.chars().take(start_char).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
        out.push_str(&format!("{pad} | {lead}{}\n", "^".repeat(width)));
    }
    for note in &diag.notes {
        let mut lines = note.lines();
        out.push_str(&format!("{pad} = note: {}\n", lines.next().unwrap_or("")));
        for more in lines {
            out.push_str(&format!("{pad}         {more}\n"));
        }
    }
    out
}

/// Renders every diagnostic (in order) followed by a summary line such as
/// `2 errors, 1 warning` (nothing when `diags` is empty).
pub fn render_all(diags: &[Diagnostic], file: &str, source: &str) -> String {
    let mut out = String::new();
    for d in diags {
        out.push_str(&render(d, file, source));
    }
    let errors = diags.iter().filter(|d| d.is_error()).count();
    let warnings = diags.len() - errors;
    if !diags.is_empty() {
        let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        out.push_str(&format!("{file}: {}, {}\n", plural(errors, "error"), plural(warnings, "warning")));
    }
    out
}

/// The text of 1-based line `line` (without its line terminator) and its byte offset.
fn source_line(source: &str, line: u32) -> Option<(usize, &str)> {
    let mut start = 0usize;
    for (i, text) in source.split('\n').enumerate() {
        if i + 1 == line as usize {
            return Some((start, text.strip_suffix('\r').unwrap_or(text)));
        }
        start += text.len() + 1;
    }
    None
}

/// Maps byte offsets to 1-based lines and (character) columns.
#[derive(Debug, Clone)]
pub(crate) struct LineIndex<'a> {
    source: &'a str,
    /// Byte offset of the start of each line.
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub(crate) fn new(source: &'a str) -> LineIndex<'a> {
        let mut starts = vec![0];
        starts.extend(source.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { source, starts }
    }

    /// (line, col), both 1-based; col counts characters.
    pub(crate) fn line_col(&self, offset: usize) -> (u32, u32) {
        let offset = offset.min(self.source.len());
        let line = self.starts.partition_point(|&s| s <= offset) - 1;
        let start = self.starts[line];
        let col = match self.source.get(start..offset) {
            Some(prefix) => prefix.chars().count(),
            None => offset - start,
        };
        (line as u32 + 1, col as u32 + 1)
    }

    pub(crate) fn span(&self, start: usize, end: usize) -> Span {
        let (line, col) = self.line_col(start);
        Span { start, end: end.max(start), line, col }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_index_counts_characters() {
        let src = "ab\néé x\n";
        let idx = LineIndex::new(src);
        assert_eq!(idx.line_col(0), (1, 1));
        assert_eq!(idx.line_col(3), (2, 1));
        assert_eq!(idx.line_col(src.find('x').unwrap()), (2, 4));
        assert_eq!(idx.line_col(src.len()), (3, 1));
    }

    #[test]
    fn render_clamps_to_line_and_shows_notes() {
        let src = "service s\nstates {\n  initial A\n}\n";
        let start = src.find("states").unwrap();
        let d = Diagnostic::error("oops", LineIndex::new(src).span(start, src.len())).with_note("first\nsecond");
        assert_eq!(
            render(&d, "f.machine", src),
            "f.machine:2:1: error: oops\n   2 | states {\n     | ^^^^^^^^\n     = note: first\n             second\n"
        );
    }

    #[test]
    fn render_survives_bogus_spans() {
        let d = Diagnostic::error("x", Span { start: 500, end: 3, line: 9, col: 40 });
        let out = render(&d, "f", "one line");
        assert_eq!(out, "f:9:40: error: x\n");
        let d = Diagnostic::error("x", Span { start: 500, end: 3, line: 1, col: 40 });
        assert!(render(&d, "f", "one line").ends_with("| one line\n     |         ^\n"));
    }
}
