//! Text that came from outside — a declared path or name, a record, a Docker or nft answer, a
//! process name — printed for a person. A control character in it (a newline, a carriage
//! return, an escape sequence) or a bidirectional override could make what the person reads lie
//! about what is there: a plan line that seems to end early, a path that overwrites the line
//! before it, colours or a cleared screen. Such characters are written as escapes (`\n`,
//! `\u{1b}`), never raw.

use std::borrow::Cow;

/// Whether `c` changes what a terminal shows beyond a glyph of its own: a C0 or C1 control
/// character, DEL, or a bidirectional formatting character (which reorders what follows it).
pub fn is_hazard(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

fn escaped(s: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(|c| is_hazard(c) && !keep(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !is_hazard(c) || keep(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

/// `s` for one line of output: every hazard escaped, newlines and tabs too.
pub fn escape(s: &str) -> Cow<'_, str> {
    escaped(s, |_| false)
}

/// `s` for output that may span lines (a tool's message, a rendered report): every hazard
/// escaped but newline and tab.
pub fn escape_keeping_lines(s: &str) -> Cow<'_, str> {
    escaped(s, |c| c == '\n' || c == '\t')
}

/// An error and its causes on one line, "what failed: why: …", each cause once (one whose text
/// the line already holds is left out). An HTTP client's "error sending request" says why only
/// in its causes: the connection refused, the name not resolved, the time out.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let said = s.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = s.source();
    }
    text
}

/// A free-form string of a container (image, volume source or target, command argument,
/// environment or label key) that `mesh show` prints: no control or bidirectional formatting
/// character. An environment or label value may hold a newline; it is escaped when printed.
pub fn check_printable(what: &str, s: &str) -> Result<(), String> {
    match s.chars().find(|c| is_hazard(*c)) {
        Some(c) => Err(format!(
            "{what} `{}` holds the control character U+{:04X}",
            escape(s),
            c as u32
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each cause is said once, after what failed; one the line already says is left out.
    #[test]
    fn a_chain_says_each_cause_once() {
        #[derive(Debug, thiserror::Error)]
        enum E {
            #[error("error sending request")]
            Request(#[source] std::io::Error),
            #[error("reading: {0}")]
            Reading(#[source] std::io::Error),
        }
        let refused = || std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(
            chain(&E::Request(refused())),
            "error sending request: refused"
        );
        assert_eq!(chain(&E::Reading(refused())), "reading: refused");
    }

    /// Plain text passes untouched; every hazard is written as an escape a person can read.
    #[test]
    fn hazards_are_escaped() {
        assert!(matches!(escape("/etc/motd"), Cow::Borrowed(_)));
        assert_eq!(escape("/etc/a\nb\r\u{1b}[2J"), "/etc/a\\nb\\r\\u{1b}[2J");
        assert_eq!(escape("x\u{202e}txt.sh"), "x\\u{202e}txt.sh");
        assert_eq!(escape("\u{85}\u{7f}"), "\\u{85}\\u{7f}");
        assert_eq!(
            escape_keeping_lines("line 1\n\tline 2\u{1b}[31m"),
            "line 1\n\tline 2\\u{1b}[31m"
        );
        assert_eq!(escape("née ✓"), "née ✓");
    }
}
