//! One diagnostic type for everything the compiler rejects, Nickel's errors and the mesh's own
//! alike: a message, the source it points into, labelled spans, and help. Rendered by miette with
//! the file, line and column, the way Nickel itself shows them.

use std::fmt;
use std::path::Path;

use mesh_lib::text::{escape, escape_keeping_lines};
use miette::{Diagnostic, LabeledSpan, NamedSource, SourceCode};

/// A source a diagnostic points into: its display name and text.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Source {
    /// The name shown to the user (a path relative to the working folder where possible).
    pub name: String,
    /// The full text.
    pub text: String,
}

/// A labelled span in a [`Source`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Span {
    /// The source it is in.
    pub source: Source,
    /// Byte range.
    pub range: std::ops::Range<usize>,
    /// What the span shows.
    pub label: String,
}

/// A rejection, in the mesh's voice, with where it is. It crosses from the evaluating process
/// to the mesh as data (see [`crate::bounded`]): its parts serialise, and the source snippet is
/// made again from them.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(from = "Parts", into = "Parts")]
pub struct MeshDiagnostic {
    /// What is wrong, naming the offending value (or both sides).
    pub message: String,
    /// Where: the primary span and, in the same source, secondary ones.
    pub spans: Vec<Span>,
    /// What to do about it.
    pub help: Option<String>,
    /// Spans in other sources, each shown as its own snippet.
    pub related: Vec<MeshDiagnostic>,
    named: Option<Box<NamedSource<String>>>,
}

impl MeshDiagnostic {
    /// A diagnostic with a message only.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            spans: Vec::new(),
            help: None,
            related: Vec::new(),
            named: None,
        }
    }

    /// Adds a span. The first span's source is the diagnostic's source; spans in other sources
    /// become related diagnostics.
    pub fn with_span(mut self, span: Span) -> Self {
        match self.spans.first() {
            Some(first) if first.source.name != span.source.name => {
                let label = span.label.clone();
                self.related
                    .push(MeshDiagnostic::new(label).with_span(span));
            }
            _ => {
                if self.named.is_none() {
                    self.named = Some(Box::new(NamedSource::new(
                        escape(&span.source.name),
                        shown_source(&span.source.text),
                    )));
                }
                self.spans.push(span);
            }
        }
        self
    }

    fn from_parts(parts: Parts) -> Self {
        let named = parts.spans.first().map(|span| {
            Box::new(NamedSource::new(
                escape(&span.source.name),
                shown_source(&span.source.text),
            ))
        });
        Self {
            message: parts.message,
            spans: parts.spans,
            help: parts.help,
            related: parts.related,
            named,
        }
    }

    /// Adds help text.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// "file:line:column" of the primary span, if any.
    pub fn location(&self) -> Option<String> {
        let span = self.spans.first()?;
        let before = &span.source.text[..span.range.start.min(span.source.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        Some(format!("{}:{line}:{column}", span.source.name))
    }
}

/// A source as a snippet shows it: every character that could make the snippet lie (see
/// [`mesh_lib::text`]) becomes `?`, one per byte, so every span's byte range still points where
/// it did. Newlines, tabs and a carriage return ending a line stay.
fn shown_source(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let line_end = c == '\r' && chars.peek() == Some(&'\n');
        if mesh_lib::text::is_hazard(c) && c != '\n' && c != '\t' && !line_end {
            out.extend(std::iter::repeat_n('?', c.len_utf8()));
        } else {
            out.push(c);
        }
    }
    out
}

/// A [`MeshDiagnostic`]'s data.
#[derive(serde::Serialize, serde::Deserialize)]
struct Parts {
    message: String,
    spans: Vec<Span>,
    help: Option<String>,
    related: Vec<MeshDiagnostic>,
}

impl From<Parts> for MeshDiagnostic {
    fn from(parts: Parts) -> Self {
        Self::from_parts(parts)
    }
}

impl From<MeshDiagnostic> for Parts {
    fn from(d: MeshDiagnostic) -> Self {
        Parts {
            message: d.message,
            spans: d.spans,
            help: d.help,
            related: d.related,
        }
    }
}

impl fmt::Display for MeshDiagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape_keeping_lines(&self.message))
    }
}

impl std::error::Error for MeshDiagnostic {}

impl Diagnostic for MeshDiagnostic {
    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|h| Box::new(escape_keeping_lines(h)) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        self.named.as_deref().map(|n| n as &dyn SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if self.spans.is_empty() {
            return None;
        }
        Some(Box::new(self.spans.iter().enumerate().map(|(i, s)| {
            let label = (!s.label.is_empty()).then(|| escape(&s.label).into_owned());
            let len = s.range.end.saturating_sub(s.range.start);
            if i == 0 {
                LabeledSpan::new_primary_with_span(label, (s.range.start, len))
            } else {
                LabeledSpan::new_with_span(label, (s.range.start, len))
            }
        })))
    }

    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn Diagnostic> + 'a>> {
        if self.related.is_empty() {
            return None;
        }
        Some(Box::new(self.related.iter().map(|d| d as &dyn Diagnostic)))
    }
}

/// How a path is shown: relative to the working folder when it is under it.
pub fn display_name(path: &Path) -> String {
    if let Ok(cwd) = std::env::current_dir() {
        if let Ok(rel) = path.strip_prefix(&cwd) {
            return rel.display().to_string();
        }
    }
    path.display().to_string()
}
