//! Source definitions in a session: `fn`, `struct` and `impl` entries in
//! the source language (`offload-lang`), typed at the prompt or loaded
//! from a `.ofk` file. They are compiled together (one may use what
//! another defines), and what they compile to is defined as bytecode, so
//! `run`, `:bytecode` and the other commands see them like any
//! definition. A source entry that defines a name an earlier one defined
//! replaces that earlier entry.

use super::*;

/// One source entry.
#[derive(Clone, Debug)]
pub(super) struct SourceDef {
    text: String,
    /// What it defines (see `offload_lang::item_names`), each with its
    /// line in `origin`.
    names: Vec<(String, u32)>,
    /// Where it came from, and its first line there.
    origin: String,
    line: u32,
}

impl Session {
    /// Define (or redefine) the source items of `text`, which came from
    /// `origin` starting at line `line`.
    pub(super) fn define_source(
        &mut self,
        text: &str,
        origin: &str,
        line: u32,
        out: &mut String,
    ) -> Result<()> {
        // The new entry goes first, at its own line numbers, so that its
        // errors point at the lines the user sees.
        let padded = format!("{}{}", "\n".repeat(line as usize - 1), text);
        let names = offload::lang::item_names(origin, &padded).map_err(|d| {
            ReplError::Entry(defs::strip_error(&offload::diagnostics::render_all(
                &d.0, &padded,
            )))
        })?;
        if names.is_empty() {
            bail!("{origin}: no fn, struct or impl definition found");
        }
        let kept: Vec<SourceDef> = self
            .sources
            .iter()
            .filter(|s| {
                !s.names
                    .iter()
                    .any(|(n, _)| names.iter().any(|(m, _)| m == n))
            })
            .cloned()
            .collect();
        let mut combined = padded.clone();
        // Where each entry's text lies in `combined`: its first line there,
        // its origin and its first line in the origin.
        let mut placed = vec![(1u32, origin.to_string(), 1u32)];
        for s in &kept {
            combined.push('\n');
            let at = combined.lines().count() as u32 + 1;
            placed.push((at, s.origin.clone(), s.line));
            combined.push_str(&s.text);
        }
        let verified = offload::lang::compile_verified(origin, &combined).map_err(|d| {
            ReplError::Entry(defs::strip_error(&offload::diagnostics::render_all(
                &d.0, &combined,
            )))
        })?;
        // Each function's instructions, by source line in its origin:
        // traces name the line a workitem stopped at.
        let mut lines = std::collections::HashMap::new();
        for f in &verified.funcs {
            let Some(first) = f.debug.inst_spans.first() else {
                continue;
            };
            let Some((at, o, l)) = placed.iter().rev().find(|(at, _, _)| *at <= first.line) else {
                continue;
            };
            let by_bci = f
                .debug
                .inst_spans
                .iter()
                .map(|sp| sp.line + l - at)
                .collect::<Vec<u32>>();
            lines.insert(f.name.clone(), (o.clone(), by_bci));
        }
        let bytecode = offload::ir::print_module(&verified);
        // Every item is defined again; say only what this entry defined.
        let mut said = String::new();
        self.define(&bytecode, origin, 1, &mut said)?;
        for l in said.lines() {
            let mentions = l
                .split_whitespace()
                .nth(2)
                .map(|n| n.trim_end_matches(','))
                .is_some_and(|n| names.iter().any(|(m, _)| m == n));
            if mentions || !(l.starts_with("defined ") || l.starts_with("redefined ")) {
                out.push_str(l);
                out.push('\n');
            }
        }
        self.source_lines = lines;
        self.sources = kept;
        self.sources.push(SourceDef {
            text: text.to_string(),
            names,
            origin: origin.to_string(),
            line,
        });
        // Each definition came from a source line, not from the printed
        // bytecode: say where.
        for d in &mut self.defs {
            let found = self.sources.iter().find_map(|s| {
                s.names
                    .iter()
                    .find(|(n, _)| *n == d.item.name)
                    .map(|(_, l)| (s.origin.clone(), *l))
            });
            if let Some((origin, l)) = found {
                d.origin = origin;
                d.item.line = l;
                d.compiled = true;
            }
        }
        Ok(())
    }

    /// A trace line `at NAME (FILE:LINE:COL, bci B)` of a function
    /// compiled from source, with the source line of bytecode index `B`:
    /// `at NAME (ORIGIN:LINE, bci B)`. `None` for other lines.
    pub(super) fn source_trace_line(&self, l: &str) -> Option<String> {
        let t = TraceLine::parse(l)?;
        let name = t.head.trim_start().strip_prefix("at ")?;
        let (origin, lines) = self.source_lines.get(name)?;
        let line = lines.get(t.bci.parse::<usize>().ok()?)?;
        Some(format!("{} ({origin}:{line}, bci {})", t.head, t.bci))
    }

    /// The source entries, for `:defs`: where each came from and what it
    /// defines.
    pub(super) fn sources_text(&self, out: &mut String) {
        if self.sources.is_empty() {
            return;
        }
        let mut t = offload::table::new(["source entry", "defines"]);
        for s in &self.sources {
            let names: Vec<&str> = s.names.iter().map(|(n, _)| n.as_str()).collect();
            t.add_row([format!("{}:{}", s.origin, s.line), names.join(", ")]);
        }
        out.push_str(&offload::table::text(&t));
    }
}

/// A trace line as `offload_host_interp::TraceFrame` writes it:
/// `HEAD (FILE:LINE:COL, bci B)`.
pub(super) struct TraceLine<'a> {
    /// `    at NAME`.
    pub(super) head: &'a str,
    /// The line in the module's source.
    pub(super) line: u32,
    /// The bytecode index.
    pub(super) bci: &'a str,
}

impl<'a> TraceLine<'a> {
    pub(super) fn parse(l: &'a str) -> Option<TraceLine<'a>> {
        let inner = l.strip_suffix(')')?;
        let open = inner.rfind(" (")?;
        let (place, bci) = inner[open + 2..].split_once(", bci ")?;
        let mut parts = place.rsplitn(3, ':');
        let (_col, line) = (parts.next()?, parts.next()?);
        Some(TraceLine {
            head: &l[..open],
            line: line.parse().ok()?,
            bci,
        })
    }
}
