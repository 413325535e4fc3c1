//! Text layout shared by the renderers: the width rule, word wrapping that never splits a
//! word (a long token such as a sysfs path breaks only after a separator: '/', ':', '.', ',',
//! '=', '-'), box tables that wrap their cells the same way, and plurals. Pure: the width comes
//! from the caller (Config), never from the environment.

/// Width of human output in a pipe (a file, a log, a snapshot): terminals use their own width or
/// COLUMNS.
pub const PIPE_WIDTH: usize = 100;

/// The narrowest layout attempted: below it output would be mostly line breaks.
const MIN_WIDTH: usize = 40;

/// The width to lay out for: the terminal's (or COLUMNS), else PIPE_WIDTH.
pub fn width(terminal: Option<u16>) -> usize {
    terminal
        .map(usize::from)
        .unwrap_or(PIPE_WIDTH)
        .max(MIN_WIDTH)
}

pub use crate::words::count;

fn is_separator(c: char) -> bool {
    matches!(c, '/' | ':' | '.' | ',' | '=' | '-' | '_' | ';')
}

/// Pieces of `word`, each at most `width` columns: cut after the last separator that fits, and
/// only where no separator fits (a long hex string) at the width itself.
pub fn break_word(word: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let chars: Vec<char> = word.chars().collect();
    let mut out = Vec::new();
    let mut start = 0;
    while chars.len() - start > width {
        let window = &chars[start..start + width];
        let cut = window
            .iter()
            .rposition(|c| is_separator(*c))
            .map(|i| i + 1)
            .unwrap_or(width);
        out.push(chars[start..start + cut].iter().collect());
        start += cut;
    }
    out.push(chars[start..].iter().collect());
    out
}

/// Greedy word wrap of one paragraph: the first line at most `first_room` columns, the others
/// at most `room`. Whitespace runs collapse to one space; a word longer than its line is broken
/// by `break_word`.
pub fn wrap_words(text: &str, first_room: usize, room: usize) -> Vec<String> {
    let words: Vec<(usize, &str)> = text.split_whitespace().map(|w| (1, w)).collect();
    wrap_tokens(&words, first_room, room)
}

/// The same, keeping the spaces between words that stay on one line (a list's aligned columns
/// keep their alignment on the line they start); a word that starts a line drops its gap.
fn wrap_keeping_gaps(text: &str, first_room: usize, room: usize) -> Vec<String> {
    let mut words: Vec<(usize, &str)> = Vec::new();
    let mut gap = 0;
    for piece in text.split(' ') {
        if piece.is_empty() {
            gap += 1;
        } else {
            words.push((gap.max(1), piece));
            gap = 1;
        }
    }
    wrap_tokens(&words, first_room, room)
}

/// Greedy wrap of `(gap before, word)` tokens.
fn wrap_tokens(words: &[(usize, &str)], first_room: usize, room: usize) -> Vec<String> {
    let room = room.max(1);
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    let mut len = 0;
    let mut limit = first_room;
    for &(gap, w) in words {
        let n = w.chars().count();
        if !line.is_empty() && len + gap + n <= limit {
            line.extend(std::iter::repeat_n(' ', gap));
            line.push_str(w);
            len += gap + n;
            continue;
        }
        if !line.is_empty() || (n > limit && n <= room && lines.is_empty()) {
            // A full line, or a first line too short for a word that fits a whole one.
            lines.push(std::mem::take(&mut line));
            limit = room;
        }
        let mut rest: Vec<char> = w.chars().collect();
        while rest.len() > limit.max(1) {
            let piece: String = rest.iter().collect();
            let head = break_word(&piece, limit.max(1)).swap_remove(0);
            let k = head.chars().count();
            lines.push(head);
            rest.drain(..k);
            limit = room;
        }
        line = rest.into_iter().collect();
        len = line.chars().count();
    }
    lines.push(line);
    lines
}

/// `text` wrapped to `width`: the first line continues after `first` columns already written,
/// every further line starts with `indent` spaces. Newlines in `text` start new (indented)
/// lines. Ends with a newline.
pub fn wrap(out: &mut String, text: &str, first: usize, indent: usize, width: usize) {
    let room = width.saturating_sub(indent).max(1);
    for (i, para) in text.split('\n').enumerate() {
        let first_room = if i == 0 {
            width.saturating_sub(first)
        } else {
            room
        };
        for (j, l) in wrap_words(para, first_room, room).iter().enumerate() {
            if i > 0 || j > 0 {
                out.push('\n');
                out.push_str(&" ".repeat(indent));
            }
            out.push_str(l);
        }
    }
    out.push('\n');
}

/// Every line of `text` at most `width` columns: a longer line is wrapped at word boundaries,
/// its continuation lines under its first word (a tree line's continuation keeps the tree's
/// vertical bars), the spaces between the words it keeps together kept (a list's aligned
/// columns stay aligned where its line starts); a rule of one repeated character is cut to the
/// width. Lines that fit are unchanged, so a renderer can lay out freely and call this last.
pub fn fit(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, nl) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        if body.chars().count() <= width {
            out.push_str(line);
            continue;
        }
        let mut chars = body.chars();
        if let Some(c) = chars.next()
            && !c.is_alphanumeric()
            && chars.all(|x| x == c)
        {
            out.extend(body.chars().take(width));
            out.push_str(nl);
            continue;
        }
        // The lead: indentation and tree drawing; continuation lines carry its bars.
        let lead: String = body
            .chars()
            .take_while(|c| matches!(c, ' ' | '│' | '├' | '└' | '─'))
            .collect();
        let cont: String = lead
            .chars()
            .map(|c| match c {
                '├' | '│' => '│',
                _ => ' ',
            })
            .collect::<String>()
            + "   ";
        let lead_len = lead.chars().count();
        let cont_len = cont.chars().count().min(width / 2);
        let cont: String = cont.chars().take(cont_len).collect();
        let rest = &body[lead.len()..];
        let lines = wrap_keeping_gaps(
            rest,
            width.saturating_sub(lead_len),
            width.saturating_sub(cont_len),
        );
        for (i, l) in lines.iter().enumerate() {
            out.push_str(if i == 0 { &lead } else { &cont });
            out.push_str(l);
            if i + 1 < lines.len() {
                out.push('\n');
            }
        }
        out.push_str(nl);
    }
    out
}

/// Column widths that fit `budget` where the words allow: each column as wide as its widest
/// line, then columns shrink towards whole words, then towards separator pieces, then down to
/// `hard` (the least a column may get); each step takes a column from the one that makes the
/// table least taller (widest on a tie). Row 0 is the header.
fn fitted_widths<'a>(
    cell: &dyn Fn(usize, usize) -> &'a str,
    nrows: usize,
    ncols: usize,
    budget: usize,
    hard: Vec<usize>,
) -> Vec<usize> {
    let col_max = |f: &dyn Fn(&str) -> usize| -> Vec<usize> {
        (0..ncols)
            .map(|c| (0..nrows).map(|r| f(cell(r, c))).max().unwrap_or(0).max(1))
            .collect()
    };
    let natural = col_max(&|s| s.lines().map(|l| l.chars().count()).max().unwrap_or(0));
    let longest_word = col_max(&|s| {
        s.split_whitespace()
            .map(|w| w.chars().count())
            .max()
            .unwrap_or(0)
    });
    let longest_piece = col_max(&|s| {
        s.split_whitespace()
            .flat_map(|w| {
                w.split_inclusive(is_separator)
                    .map(|p| p.chars().count())
                    .collect::<Vec<_>>()
            })
            .max()
            .unwrap_or(0)
    });
    let mut widths = natural;
    // Lines a cell takes at a width, and the table's height (each row as tall as its tallest).
    let cell_lines = |r: usize, c: usize, w: usize| -> usize {
        cell(r, c)
            .split('\n')
            .map(|l| wrap_words(l, w, w).len())
            .sum()
    };
    let height = |widths: &[usize]| -> usize {
        (0..nrows)
            .map(|r| {
                (0..ncols)
                    .map(|c| cell_lines(r, c, widths[c]))
                    .max()
                    .unwrap_or(1)
            })
            .sum()
    };
    let at_least =
        |f: Vec<usize>| -> Vec<usize> { f.iter().zip(&hard).map(|(a, b)| *a.max(b)).collect() };
    for floor in [
        at_least(longest_word),
        at_least(longest_piece),
        hard.clone(),
    ] {
        while widths.iter().sum::<usize>() > budget {
            let Some(c) = (0..ncols)
                .filter(|c| widths[*c] > floor[*c])
                .min_by_key(|c| {
                    let mut w = widths.clone();
                    w[*c] -= 1;
                    (height(&w), usize::MAX - widths[*c], *c)
                })
            else {
                break;
            };
            widths[c] -= 1;
        }
    }
    widths
}

/// Each cell of a row wrapped to its column: one Vec of lines per column.
fn wrapped_row(cell: &dyn Fn(usize) -> String, widths: &[usize]) -> Vec<Vec<String>> {
    widths
        .iter()
        .enumerate()
        .map(|(c, w)| {
            cell(c)
                .split('\n')
                .flat_map(|l| wrap_words(l, *w, *w))
                .collect()
        })
        .collect()
}

/// Per column, the longest of the data cells' words and the header's words: what `columns`
/// never breaks (a number, a column name).
fn unbroken_words(header: &[&str], rows: &[Vec<String>]) -> Vec<usize> {
    (0..header.len())
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c).map(String::as_str))
                .chain([header[c]])
                .flat_map(str::split_whitespace)
                .map(|w| w.chars().count())
                .max()
                .unwrap_or(1)
                .max(1)
        })
        .collect()
}

/// The width `columns` needs to give every data row one line (header cells may still wrap at
/// their spaces).
pub fn columns_one_line_width(
    header: &[&str],
    rows: &[Vec<String>],
    indent: usize,
    gap: usize,
) -> usize {
    let words = unbroken_words(header, rows);
    indent
        + gap * header.len().saturating_sub(1)
        + (0..header.len())
            .map(|c| {
                rows.iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
                    .max(words[c])
            })
            .sum::<usize>()
}

/// Aligned columns without borders (perftest's layout): `indent` spaces, then the cells, left
/// aligned, `gap` spaces apart, at most `width` columns where the words allow. Header cells may
/// hold newlines (a units line under the names); columns shrink and cells wrap at spaces as
/// `table`'s do, but a word (a number, a column name) is never broken: where even that is too
/// wide, the lines are. Callers drop columns until `columns_one_line_width` fits.
pub fn columns(
    header: &[&str],
    rows: &[Vec<String>],
    width: usize,
    indent: usize,
    gap: usize,
) -> String {
    let ncols = header.len();
    let cell = |r: usize, c: usize| -> &str {
        if r == 0 {
            header[c]
        } else {
            rows[r - 1].get(c).map_or("", String::as_str)
        }
    };
    let budget = width.saturating_sub(indent + gap * ncols.saturating_sub(1));
    let widths = fitted_widths(
        &cell,
        rows.len() + 1,
        ncols,
        budget,
        unbroken_words(header, rows),
    );
    let mut out = String::new();
    for r in 0..=rows.len() {
        let cols = wrapped_row(&|c| cell(r, c).to_string(), &widths);
        let height = cols.iter().map(Vec::len).max().unwrap_or(1);
        for i in 0..height {
            let mut line = " ".repeat(indent);
            for (c, lines) in cols.iter().enumerate() {
                if c > 0 {
                    line.push_str(&" ".repeat(gap));
                }
                let l = lines.get(i).map_or("", String::as_str);
                line.push_str(l);
                line.push_str(&" ".repeat(widths[c].saturating_sub(l.chars().count())));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    out
}

/// A box table (`+---+` borders, `=` under the header, no rules between rows) at most `width`
/// columns wide where the words allow: columns shrink widest first, cells wrap at spaces, and
/// only when every column is down to its longest word are words broken, after a separator.
/// Cells may hold newlines (one item per line).
pub fn table(header: &[&str], rows: &[Vec<String>], width: usize) -> String {
    let ncols = header.len();
    let cell = |r: usize, c: usize| -> &str {
        if r == 0 {
            header[c]
        } else {
            rows[r - 1].get(c).map_or("", String::as_str)
        }
    };
    let nrows = rows.len() + 1;
    let overhead = 3 * ncols + 1;
    let widths = fitted_widths(
        &cell,
        nrows,
        ncols,
        width.saturating_sub(overhead),
        vec![1; ncols],
    );
    let border = {
        let mut s = String::from("+");
        for w in &widths {
            s.push_str(&"-".repeat(w + 2));
            s.push('+');
        }
        s
    };
    let total = border.chars().count();
    let mut out = String::new();
    out.push_str(&border);
    out.push('\n');
    for r in 0..nrows {
        let cols = wrapped_row(&|c| cell(r, c).to_string(), &widths);
        let height = cols.iter().map(Vec::len).max().unwrap_or(1);
        for i in 0..height {
            out.push('|');
            for (c, lines) in cols.iter().enumerate() {
                let l = lines.get(i).map_or("", String::as_str);
                let pad = widths[c].saturating_sub(l.chars().count());
                out.push(' ');
                out.push_str(l);
                out.push_str(&" ".repeat(pad + 1));
                out.push('|');
            }
            out.push('\n');
        }
        if r == 0 {
            out.push('+');
            out.push_str(&"=".repeat(total.saturating_sub(2)));
            out.push_str("+\n");
        }
    }
    out.push_str(&border);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widest(s: &str) -> usize {
        s.lines().map(|l| l.chars().count()).max().unwrap_or(0)
    }

    #[test]
    fn plurals() {
        assert_eq!(
            count(1, "other function", "other functions"),
            "1 other function"
        );
        assert_eq!(count(0, "bridge", "bridges"), "0 bridges");
        assert_eq!(count(2, "bridge", "bridges"), "2 bridges");
    }

    #[test]
    fn long_words_break_after_separators_only() {
        let p = "/sys/bus/pci/devices/0000:17:00.0/0000:18:00.0/infiniband/mlx5_0/ports/1/gids";
        let pieces = break_word(p, 30);
        assert!(pieces.iter().all(|x| x.chars().count() <= 30), "{pieces:?}");
        assert_eq!(pieces.concat(), p);
        for x in &pieces[..pieces.len() - 1] {
            assert!(x.ends_with(is_separator), "{x} ends at a separator");
        }
        // No separator: cut at the width.
        assert_eq!(break_word("abcdefgh", 3), ["abc", "def", "gh"]);
    }

    #[test]
    fn wrap_keeps_words_whole() {
        let text = "the quick brown fox jumps over the lazy dog ".repeat(5);
        let lines = wrap_words(&text, 20, 20);
        assert!(lines.iter().all(|l| l.chars().count() <= 20), "{lines:?}");
        let words: Vec<&str> = text.split_whitespace().collect();
        let back: Vec<&str> = lines.iter().flat_map(|l| l.split_whitespace()).collect();
        assert_eq!(words, back, "no word split or lost");
        let mut out = String::new();
        wrap(&mut out, &text, 10, 4, 30);
        assert!(widest(&out) <= 30, "{out}");
    }

    #[test]
    fn fit_wraps_long_lines_only() {
        let short = "a short line\n";
        assert_eq!(fit(short, 40), short);
        let tree = "│  ├─ 0000:18:00.0 NIC0 mlx5_0 [ibp24s0] Mellanox MT2910 Family [ConnectX-7] | Gen5 x16 | NUMA 0\n";
        let f = fit(tree, 60);
        assert!(widest(&f) <= 60, "{f}");
        assert!(f.lines().nth(1).unwrap().starts_with("│  │     "), "{f}");
        assert_eq!(fit(&"-".repeat(100), 80), "-".repeat(80));
        // Aligned columns keep their spaces on the line they start; the wrapped rest does not.
        let list = "  gpu.ecc                  GPU2             pass -> fail: 3 volatile uncorrectable ECC errors\n";
        let f = fit(list, 60);
        assert!(widest(&f) <= 60, "{f}");
        assert!(
            f.starts_with("  gpu.ecc                  GPU2             pass -> fail: 3\n"),
            "{f}"
        );
        assert_eq!(
            f.lines().nth(1).unwrap(),
            "     volatile uncorrectable ECC errors",
            "{f}"
        );
    }

    #[test]
    fn tables_fit_and_keep_words() {
        let rows = vec![
            vec![
                "GPU0".to_string(),
                "0000:00:04.0".to_string(),
                "Mellanox ConnectX Family mlx5Gen Virtual Function".to_string(),
                "1: 4: ACTIVE InfiniBand 400 Gb/sec (4X NDR)".to_string(),
            ];
            3
        ];
        let header = ["NIC", "BDF", "Name", "Ports"];
        let wide = table(&header, &rows, 200);
        assert_eq!(
            wide.lines().count(),
            7,
            "one line per row when it fits:\n{wide}"
        );
        for w in [100, 80, 60, 50] {
            let t = table(&header, &rows, w);
            assert!(widest(&t) <= w, "{w}:\n{t}");
            for word in ["Mellanox", "ConnectX", "0000:00:04.0", "InfiniBand"] {
                assert!(t.contains(word), "{w}: {word} split:\n{t}");
            }
        }
    }
}
