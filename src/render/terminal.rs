//! Text bound for a terminal or a drain reason: recorded strings (GPU names, firmware
//! versions, device and file names, report messages) come from the node or the fleet's files,
//! and a control sequence in one would drive the operator's terminal (clear the screen, set
//! the title, hide or reorder text). Every control character is shown escaped, visibly; JSON
//! output keeps them exact (it is not rendered here).
//!
//! This module must not drop or reorder characters: what is shown is what was recorded, with
//! controls spelled out.

use std::borrow::Cow;

/// A character that must not reach a terminal as itself: C0 controls (but newline and tab,
/// which the renderers lay text out with), DEL, C1 controls (U+0080-U+009F: U+009B is CSI on
/// terminals that take 8-bit controls), and the Unicode bidirectional overrides, embeddings
/// and isolates (U+202A-U+202E, U+2066-U+2069, "Trojan Source", CVE-2021-42574) and marks
/// (U+200E, U+200F, U+061C) that reorder what is shown.
fn is_control(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        | '\u{200e}' | '\u{200f}' | '\u{61c}')
}

/// `s` with every control character escaped (`\x1b`, `\u{202e}`); newlines and tabs kept.
pub fn escape_text(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_control(c) {
            if (c as u32) < 0x100 {
                out.push_str(&format!("\\x{:02x}", c as u32));
            } else {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// One line's worth (a drain reason, a warning): newlines and tabs escaped too.
pub fn escape(s: &str) -> String {
    escape_text(s).replace('\n', "\\n").replace('\t', "\\t")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_are_shown_escaped() {
        assert_eq!(escape_text("plain text\nline"), "plain text\nline");
        assert_eq!(
            escape_text("a\u{1b}]0;t\u{7}b\u{9b}31m\u{7f}\u{202e}c\u{2066}"),
            "a\\x1b]0;t\\x07b\\x9b31m\\x7f\\u{202e}c\\u{2066}"
        );
        assert_eq!(escape("a\nb\tc\r"), "a\\nb\\tc\\x0d");
        assert_eq!(escape_text("GPU-Ω ünïcode"), "GPU-Ω ünïcode");
    }
}
