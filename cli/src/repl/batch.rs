//! Consecutive definitions read from a pipe or a script are defined
//! together. Each definition reloads the session's whole module (any
//! definition may use any other), so defining a thousand functions one at a
//! time would parse and verify the session a thousand times over; a batch
//! loads it once. What a user sees is the same as one at a time: each
//! entry's echo, then what defining it printed. When the batch does not load,
//! its entries are run one at a time, so that the error is the one entry's
//! that has it.

use super::input;
use super::session::Session;

/// One entry of a batch, after it ran.
#[derive(Debug)]
pub struct Done {
    /// The entry's text.
    pub entry: String,
    /// Its first line in the input.
    pub start: u32,
    /// What it printed.
    pub out: String,
    /// Its error, if it failed.
    pub err: Option<String>,
}

/// Definition entries waiting to be defined together.
#[derive(Debug, Default)]
pub struct Batch {
    entries: Vec<(String, u32)>,
    definitions: usize,
}

fn is_comment(e: &str) -> bool {
    e.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with(';')
    })
}

fn is_definition(e: &str) -> bool {
    e.lines()
        .find(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with(';')
        })
        .is_some_and(input::starts_definition)
}

impl Batch {
    /// Whether entry `e` joins the batch: a definition, or a comment while
    /// definitions wait (the narration between them).
    pub fn takes(&self, e: &str) -> bool {
        is_definition(e) || (self.definitions > 0 && is_comment(e))
    }

    /// Adds entry `e`, which starts at line `start`.
    pub fn push(&mut self, e: String, start: u32) {
        self.definitions += usize::from(is_definition(&e));
        self.entries.push((e, start));
    }

    /// Defines the batch on `s` and returns its entries in order with what
    /// each printed.
    pub fn flush(&mut self, s: &mut Session, origin: &str) -> Vec<Done> {
        let entries = std::mem::take(&mut self.entries);
        let definitions = std::mem::take(&mut self.definitions);
        if definitions < 2 {
            return one_at_a_time(s, origin, entries);
        }
        // The definitions as one text, each at its own line (the comment
        // entries between them are narration, not part of a definition).
        let first = entries[0].1;
        let mut text = String::new();
        let mut line = first;
        for (e, start) in entries.iter().filter(|(e, _)| is_definition(e)) {
            while line < *start {
                text.push('\n');
                line += 1;
            }
            text.push_str(e);
            line += e.matches('\n').count() as u32;
        }
        let mut out = String::new();
        if s.execute_at(&text, origin, first, &mut out).is_err() {
            return one_at_a_time(s, origin, entries);
        }
        // Defining prints a line per definition, in order, then what
        // concerns them all.
        let mut lines = out.lines();
        let mut done: Vec<Done> = entries
            .into_iter()
            .map(|(entry, start)| {
                let n = input::items(&entry).len();
                let mut own = String::new();
                for l in lines.by_ref().take(n) {
                    own.push_str(l);
                    own.push('\n');
                }
                Done {
                    entry,
                    start,
                    out: own,
                    err: None,
                }
            })
            .collect();
        if let Some(last) = done.last_mut() {
            for l in lines {
                last.out.push_str(l);
                last.out.push('\n');
            }
        }
        done
    }
}

fn one_at_a_time(s: &mut Session, origin: &str, entries: Vec<(String, u32)>) -> Vec<Done> {
    entries
        .into_iter()
        .map(|(entry, start)| {
            let mut out = String::new();
            let err = s
                .execute_at(&entry, origin, start, &mut out)
                .err()
                .map(|e| e.to_string());
            Done {
                entry,
                start,
                out,
                err,
            }
        })
        .collect()
}
