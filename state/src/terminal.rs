//! Text from outside Ballast made safe to print on a terminal: the one escaping of control characters.
//!
//! A name an operator's input carries (a kops field's key, a label key, an object's name) reaches the terminal in
//! tables and errors. An escape sequence in it (`\x1b]0;...`, `\x1b[2J`) would be run by the terminal: retitle it,
//! clear it, hide the lines before. Every control character (C0, DEL, C1) and every bidirectional override is
//! written as Rust writes it in a string literal (`\u{1b}`, `\u{202e}`, `\t`, `\r`, `\n`), so what is printed is
//! exactly what the input held, readable and inert.

use std::borrow::Cow;

/// `text` with every control character escaped (newlines included): for a name, a key or a table cell.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_char(&mut out, c);
    }
    Cow::Owned(out)
}

/// `text` with every control character escaped except `\n`: for a message whose lines are Ballast's own layout
/// (an error listing one problem per line), where each line's content may come from outside.
pub fn escape_controls_keeping_lines(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c != '\n' && needs_escape(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c == '\n' {
            out.push(c);
        } else {
            push_char(&mut out, c);
        }
    }
    Cow::Owned(out)
}

/// A character a terminal acts on rather than shows: C0 and C1 controls, DEL, and the bidirectional embeddings,
/// overrides and isolates (which reorder what is shown, "Trojan Source").
fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn push_char(out: &mut String, c: char) {
    if needs_escape(c) {
        out.extend(c.escape_debug());
    } else {
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_written_as_literals() {
        assert_eq!(
            escape_controls("a\u{1b}]0;owned\u{7}b\u{1b}[2J"),
            "a\\u{1b}]0;owned\\u{7}b\\u{1b}[2J"
        );
        assert_eq!(escape_controls("x\ny\tz\r"), "x\\ny\\tz\\r");
        assert_eq!(escape_controls("\u{9b}31m\u{7f}"), "\\u{9b}31m\\u{7f}");
        assert_eq!(escape_controls("abc\u{202e}def"), "abc\\u{202e}def");
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        for text in [
            "spec.subnets[0].cidr",
            "kops.k8s.io/cluster",
            "ünïcode – ok",
            "",
        ] {
            assert!(matches!(escape_controls(text), Cow::Borrowed(t) if t == text));
        }
    }

    #[test]
    fn lines_survive_when_kept() {
        assert_eq!(
            escape_controls_keeping_lines("error: 2 errors\n  a\u{1b}[31m: x\n  b"),
            "error: 2 errors\n  a\\u{1b}[31m: x\n  b"
        );
    }
}
