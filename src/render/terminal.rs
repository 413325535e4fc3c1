//! Text bound for a reader: a terminal or a drain reason, a Markdown table, an XML document.
//! Recorded strings (GPU names, firmware versions, device and file names, report messages)
//! come from the node or the fleet's files, and a control sequence in one would drive the
//! operator's terminal (clear the screen, set the title, hide or reorder text); a `|`, a
//! newline or `<script>` would break a Markdown table or put HTML into a ticket; a character
//! XML 1.0 does not allow makes a CI system reject the whole JUnit file. Every control
//! character is shown escaped, visibly, the same way in every format; JSON output keeps them
//! exact (it is not rendered here). The HTML page applies the same rule (`html::esc`).
//!
//! This module must not drop or reorder characters: what is shown is what was recorded, with
//! controls spelled out and each format's special characters escaped in that format's syntax.

use std::borrow::Cow;

/// A character that must not reach a terminal as itself: C0 controls (but newline and tab,
/// which the renderers lay text out with), DEL, C1 controls (U+0080-U+009F: U+009B is CSI on
/// terminals that take 8-bit controls), and the Unicode bidirectional overrides, embeddings
/// and isolates (U+202A-U+202E, U+2066-U+2069, "Trojan Source", CVE-2021-42574) and marks
/// (U+200E, U+200F, U+061C) that reorder what is shown; and the noncharacters U+FFFE and
/// U+FFFF, which no text should carry and XML 1.0 cannot (its `Char` production), so that one
/// rule serves every format.
fn is_control(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        | '\u{200e}' | '\u{200f}' | '\u{61c}' | '\u{fffe}' | '\u{ffff}')
}

/// `s` with every control character escaped (`\x1b`, `\u{202e}`); newlines and tabs kept.
pub fn escape_text(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_control(c) {
            push_shown(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The visible spelling of a control character: `\x1b` below U+0100, `\u{202e}` above.
fn push_shown(out: &mut String, c: char) {
    use std::fmt::Write;
    let _ = if (c as u32) < 0x100 {
        write!(out, "\\x{:02x}", c as u32)
    } else {
        write!(out, "\\u{{{:x}}}", c as u32)
    };
}

/// One line's worth (a drain reason, a warning): newlines and tabs escaped too.
pub fn escape(s: &str) -> String {
    escape_text(s).replace('\n', "\\n").replace('\t', "\\t")
}

/// A recorded string as the text of one Markdown table cell (GitHub Flavored Markdown, also
/// safe in a paragraph): controls shown as `escape_text` shows them, a newline as `<br>` (the
/// cell's row is one line), a tab as a space; `|` and the inline markup characters
/// `` \ ` * _ ~ [ ] `` backslash-escaped (CommonMark renders an escaped ASCII punctuation
/// character as itself), and `&` and `<` as character references (every HTML tag, comment
/// and entity starts with one of them; a lone `>` or `"` is text, and stays readable in
/// "present -> (missing)"), so no recorded text ends a cell, opens a code span, emphasis or a
/// link, or becomes HTML. Rendered, the cell reads as recorded. A code span cannot carry these
/// escapes, so recorded strings are never put in one.
pub fn markdown_cell(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("<br>"),
            '\t' => out.push(' '),
            '\\' | '`' | '*' | '_' | '~' | '[' | ']' | '|' => {
                out.push('\\');
                out.push(c);
            }
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            c if is_control(c) => push_shown(&mut out, c),
            c => out.push(c),
        }
    }
    out
}

/// A recorded string as XML 1.0 character data or a quoted attribute value (JUnit): `& < > " '`
/// as references and controls shown as `escape_text` shows them (newline and tab kept: XML
/// carries them). That covers all XML 1.0's `Char` production excludes (C0 controls but tab,
/// newline and carriage return; U+FFFE and U+FFFF; surrogates cannot occur in a Rust string),
/// so the document parses with a strict parser whatever was recorded.
pub fn xml_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' => out.push(c),
            c if is_control(c) => push_shown(&mut out, c),
            c => out.push(c),
        }
    }
    out
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

    #[test]
    fn markdown_cells_and_xml_text_carry_anything() {
        assert_eq!(
            markdown_cell("a|b`c`\n<script>&\u{1b}[2J_x_\\"),
            "a\\|b\\`c\\`<br>&lt;script>&amp;\\x1b\\[2J\\_x\\_\\\\"
        );
        assert_eq!(
            markdown_cell("node17 h200-sku 54.1"),
            "node17 h200-sku 54.1"
        );
        assert_eq!(
            xml_text("a<b & \"c\"\n\u{1}\u{ffff}\u{fffe}\u{9b}\r"),
            "a&lt;b &amp; &quot;c&quot;\n\\x01\\u{ffff}\\u{fffe}\\x9b\\x0d"
        );
    }
}
