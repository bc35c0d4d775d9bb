//! Where one REPL entry ends, and how `.obc` text splits into definitions.
//!
//! An entry is one line, unless it starts a definition (`class`, `kernel`,
//! `func`, or a `;` comment before one): then it runs until the braces it
//! opened are closed. Pasted `.obc` text with several definitions is one
//! entry per definition. A source definition (`fn`, `struct`, `impl`,
//! `#[kernel]`, `#[extends(..)]`, or a `//` comment before one) likewise
//! runs until its braces close; its comments are `//`, and `;` is code.

/// The brace depth after `text` (comments after `;` do not count), and
/// whether any brace was opened.
fn depth(text: &str) -> (i64, bool) {
    let mut d = 0i64;
    let mut opened = false;
    for line in text.lines() {
        let code = line.split(';').next().unwrap_or("");
        for c in code.chars() {
            match c {
                '{' => {
                    d += 1;
                    opened = true;
                }
                '}' => d -= 1,
                _ => {}
            }
        }
    }
    (d, opened)
}

/// The keywords that start a definition.
pub const DEF_KEYWORDS: [&str; 3] = ["class", "kernel", "func"];

/// Whether `line` starts (or, as a comment, may precede) a definition.
pub fn starts_definition(line: &str) -> bool {
    let t = line.trim_start();
    starts_source(line)
        || DEF_KEYWORDS.iter().any(|k| {
            t.strip_prefix(k)
                .is_some_and(|r| r.starts_with(char::is_whitespace))
        })
}

/// The words that start a source definition (`offload-lang`).
pub const SOURCE_KEYWORDS: [&str; 4] = ["fn", "struct", "impl", "pub"];

/// Whether `line` starts a source definition: `fn`, `struct`, `impl`, or
/// an attribute (`#[kernel]`, `#[extends(C)]`).
pub fn starts_source(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("#[")
        || SOURCE_KEYWORDS.iter().any(|k| {
            t.strip_prefix(k)
                .is_some_and(|r| r.starts_with(char::is_whitespace))
        })
}

/// Whether `line` is a comment line (`;` in bytecode, `//` in source).
pub fn is_comment(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with(';') || t.starts_with("//")
}

/// Whether `text` (one or more lines) is a complete entry.
pub fn complete(text: &str) -> bool {
    let mut e = Entry::default();
    let mut done = false;
    for l in text.split('\n') {
        done = e.push(l);
    }
    done
}

/// An entry being read line by line. Each line is looked at once, so
/// reading an entry is linear in its length however many lines it has.
#[derive(Debug, Default)]
pub struct Entry {
    text: String,
    lines: u32,
    /// `None` until the first line of code; then whether it starts a
    /// definition.
    definition: Option<bool>,
    /// The definition is source (comments are `//`), not bytecode.
    source: bool,
    depth: i64,
    opened: bool,
    /// The braces open now: line (in the entry, from 1) and column of each.
    open: Vec<(u32, u32)>,
}

impl Entry {
    /// Adds a line; returns whether the entry is now complete.
    pub fn push(&mut self, line: &str) -> bool {
        if self.lines > 0 {
            self.text.push('\n');
        }
        self.text.push_str(line);
        self.lines += 1;
        let t = line.trim();
        if self.definition.is_none() && !t.is_empty() && !is_comment(t) {
            self.definition = Some(starts_definition(line));
            self.source = starts_source(line);
        }
        if self.definition == Some(true) {
            let comment = if self.source { "//" } else { ";" };
            let code = line.split(comment).next().unwrap_or("");
            for (col, c) in code.chars().enumerate() {
                match c {
                    '{' => {
                        self.depth += 1;
                        self.opened = true;
                        self.open.push((self.lines, col as u32 + 1));
                    }
                    '}' => {
                        self.depth -= 1;
                        self.open.pop();
                    }
                    _ => {}
                }
            }
        }
        match self.definition {
            // Only comments so far: a definition may follow, unless this is
            // a single line (a comment on its own is a complete, empty
            // entry) or a blank line ended them.
            None => self.lines == 1 || self.text.ends_with("\n\n"),
            Some(true) => self.opened && self.depth <= 0,
            Some(false) => true,
        }
    }

    /// The innermost brace open now, if any: its line in the entry (the
    /// first line is 1) and column.
    pub fn unclosed(&self) -> Option<(u32, u32)> {
        self.open.last().copied()
    }

    /// Whether no line was added since the last [`Entry::take`].
    pub fn is_empty(&self) -> bool {
        self.lines == 0
    }

    /// Whether the entry has only blanks so far.
    pub fn is_blank(&self) -> bool {
        self.text.trim().is_empty()
    }

    /// The entry's text, leaving this one empty.
    pub fn take(&mut self) -> String {
        let text = std::mem::take(&mut self.text);
        *self = Entry::default();
        text
    }
}

/// One top-level definition of `.obc` text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// `class`, `kernel` or `func`.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// Its text, with the comment lines before it.
    pub text: String,
    /// The 1-based line of the text's first line in its source.
    pub line: u32,
}

/// Split `.obc` text into its top-level definitions (the text must parse:
/// see `offload::ir::parse_module`).
pub fn items(src: &str) -> Vec<Item> {
    let mut out = Vec::new();
    let mut pending: Vec<&str> = Vec::new();
    let mut pending_line = 0u32;
    let mut cur: Option<(Item, i64)> = None;
    for (i, line) in src.lines().enumerate() {
        let n = i as u32 + 1;
        if let Some((item, d)) = cur.as_mut() {
            item.text.push_str(line);
            item.text.push('\n');
            *d += depth(line).0;
            if *d <= 0 && line.split(';').next().unwrap_or("").contains('}') {
                out.push(cur.take().expect("current item").0);
            }
            continue;
        }
        let t = line.trim_start();
        if t.starts_with(';') {
            if pending.is_empty() {
                pending_line = n;
            }
            pending.push(line);
            continue;
        }
        if t.is_empty() {
            pending.clear();
            continue;
        }
        let Some(kind) = DEF_KEYWORDS.iter().copied().find(|k| {
            t.strip_prefix(k)
                .is_some_and(|r| r.starts_with(char::is_whitespace))
        }) else {
            pending.clear();
            continue;
        };
        let name: String = t[kind.len()..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let mut text = String::new();
        let first = if pending.is_empty() { n } else { pending_line };
        for p in pending.drain(..) {
            text.push_str(p);
            text.push('\n');
        }
        text.push_str(line);
        text.push('\n');
        let (d, opened) = depth(line);
        let item = Item {
            kind,
            name,
            text,
            line: first,
        };
        if opened && d <= 0 {
            out.push(item);
        } else {
            cur = Some((item, d));
        }
    }
    if let Some((item, _)) = cur {
        out.push(item);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_definition_is_complete_when_its_braces_close() {
        assert!(complete("run k 0..10 x"));
        assert!(complete("; just a comment"));
        assert!(!complete("kernel k(i: i64) {"));
        assert!(!complete("kernel k(i: i64) {\n    ret ; } not a brace"));
        assert!(complete("kernel k(i: i64) {\n    ret\n}"));
        assert!(!complete("; a comment\nclass A {\n"));
        assert!(complete("class A {\n    field x: i32\n}"));
    }

    #[test]
    fn items_keep_their_comments_and_lines() {
        let src = "; top\n\n; about A\nclass A {\n    field x: i32\n}\n\nkernel k(i: i64) {\n    ret\n}\nfunc f() -> i32 { i32.const 1\n ret }\n";
        let it = items(src);
        assert_eq!(it.len(), 3);
        assert_eq!(
            (it[0].kind, it[0].name.as_str(), it[0].line),
            ("class", "A", 3)
        );
        assert!(it[0].text.starts_with("; about A\nclass A {"));
        assert_eq!(
            (it[1].kind, it[1].name.as_str(), it[1].line),
            ("kernel", "k", 8)
        );
        assert_eq!(
            (it[2].kind, it[2].name.as_str(), it[2].line),
            ("func", "f", 11)
        );
    }
}
